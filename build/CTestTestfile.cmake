# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test(test_util "/work/main/build/test_util")
set_tests_properties(test_util PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
