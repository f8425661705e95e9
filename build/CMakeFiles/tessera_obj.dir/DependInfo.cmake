
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/base/log.c" "CMakeFiles/tessera_obj.dir/src/base/log.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/base/log.c.o.d"
  "/work/main/src/base/rng.c" "CMakeFiles/tessera_obj.dir/src/base/rng.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/base/rng.c.o.d"
  "/work/main/src/base/status.c" "CMakeFiles/tessera_obj.dir/src/base/status.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/base/status.c.o.d"
  "/work/main/src/base/sys.c" "CMakeFiles/tessera_obj.dir/src/base/sys.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/base/sys.c.o.d"
  "/work/main/src/kernels/dnnl_ctx.c" "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o.d"
  "/work/main/src/tensor/dtype.c" "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o.d"
  "/work/main/src/tensor/tensor.c" "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
