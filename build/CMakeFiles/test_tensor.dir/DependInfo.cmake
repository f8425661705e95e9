
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/tensor/test_tensor.c" "CMakeFiles/test_tensor.dir/tests/tensor/test_tensor.c.o" "gcc" "CMakeFiles/test_tensor.dir/tests/tensor/test_tensor.c.o.d"
  "/work/main/tests/test_util.c" "CMakeFiles/test_tensor.dir/tests/test_util.c.o" "gcc" "CMakeFiles/test_tensor.dir/tests/test_util.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/CMakeFiles/tessera_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
