file(REMOVE_RECURSE
  "CMakeFiles/test_conv.dir/tests/kernels/test_conv.c.o"
  "CMakeFiles/test_conv.dir/tests/kernels/test_conv.c.o.d"
  "CMakeFiles/test_conv.dir/tests/test_util.c.o"
  "CMakeFiles/test_conv.dir/tests/test_util.c.o.d"
  "test_conv"
  "test_conv.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_conv.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
