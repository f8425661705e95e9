file(REMOVE_RECURSE
  "CMakeFiles/test_matmul.dir/tests/kernels/test_matmul.c.o"
  "CMakeFiles/test_matmul.dir/tests/kernels/test_matmul.c.o.d"
  "CMakeFiles/test_matmul.dir/tests/test_util.c.o"
  "CMakeFiles/test_matmul.dir/tests/test_util.c.o.d"
  "test_matmul"
  "test_matmul.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_matmul.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
