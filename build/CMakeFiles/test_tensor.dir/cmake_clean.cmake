file(REMOVE_RECURSE
  "CMakeFiles/test_tensor.dir/tests/tensor/test_tensor.c.o"
  "CMakeFiles/test_tensor.dir/tests/tensor/test_tensor.c.o.d"
  "CMakeFiles/test_tensor.dir/tests/test_util.c.o"
  "CMakeFiles/test_tensor.dir/tests/test_util.c.o.d"
  "test_tensor"
  "test_tensor.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_tensor.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
