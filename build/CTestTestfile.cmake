# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test(test_base "/work/main/build/test_base")
set_tests_properties(test_base PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_graph_core "/work/main/build/test_graph_core")
set_tests_properties(test_graph_core PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_conv "/work/main/build/test_conv")
set_tests_properties(test_conv PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_matmul "/work/main/build/test_matmul")
set_tests_properties(test_matmul PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_params "/work/main/build/test_params")
set_tests_properties(test_params PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_tensor "/work/main/build/test_tensor")
set_tests_properties(test_tensor PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
add_test(test_util "/work/main/build/test_util")
set_tests_properties(test_util PROPERTIES  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive" TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;82;add_test;/work/main/CMakeLists.txt;0;")
