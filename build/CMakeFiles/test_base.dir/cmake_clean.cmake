file(REMOVE_RECURSE
  "CMakeFiles/test_base.dir/tests/base/test_base.c.o"
  "CMakeFiles/test_base.dir/tests/base/test_base.c.o.d"
  "CMakeFiles/test_base.dir/tests/test_util.c.o"
  "CMakeFiles/test_base.dir/tests/test_util.c.o.d"
  "test_base"
  "test_base.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_base.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
