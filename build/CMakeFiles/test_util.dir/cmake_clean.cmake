file(REMOVE_RECURSE
  "CMakeFiles/test_util.dir/tests/test_util.c.o"
  "CMakeFiles/test_util.dir/tests/test_util.c.o.d"
  "test_util"
  "test_util.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_util.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
