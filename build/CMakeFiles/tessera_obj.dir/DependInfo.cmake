
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
  "/work/main/src/data/idx.c" "CMakeFiles/tessera_obj.dir/src/data/idx.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/data/idx.c.o.d"
  "/work/main/src/graph/grad.c" "CMakeFiles/tessera_obj.dir/src/graph/grad.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/graph/grad.c.o.d"
  "/work/main/src/graph/graph.c" "CMakeFiles/tessera_obj.dir/src/graph/graph.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/graph/graph.c.o.d"
  "/work/main/src/io/safetensors.c" "CMakeFiles/tessera_obj.dir/src/io/safetensors.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/io/safetensors.c.o.d"
  "/work/main/src/kernels/attention.c" "CMakeFiles/tessera_obj.dir/src/kernels/attention.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/attention.c.o.d"
  "/work/main/src/kernels/conv.c" "CMakeFiles/tessera_obj.dir/src/kernels/conv.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/conv.c.o.d"
  "/work/main/src/kernels/conv_dnnl.c" "CMakeFiles/tessera_obj.dir/src/kernels/conv_dnnl.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/conv_dnnl.c.o.d"
  "/work/main/src/kernels/dnnl_ctx.c" "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o.d"
  "/work/main/src/kernels/dropout.c" "CMakeFiles/tessera_obj.dir/src/kernels/dropout.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/dropout.c.o.d"
  "/work/main/src/kernels/eltwise.c" "CMakeFiles/tessera_obj.dir/src/kernels/eltwise.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/eltwise.c.o.d"
  "/work/main/src/kernels/embedding.c" "CMakeFiles/tessera_obj.dir/src/kernels/embedding.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/embedding.c.o.d"
  "/work/main/src/kernels/matmul.c" "CMakeFiles/tessera_obj.dir/src/kernels/matmul.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/matmul.c.o.d"
  "/work/main/src/kernels/misc.c" "CMakeFiles/tessera_obj.dir/src/kernels/misc.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/misc.c.o.d"
  "/work/main/src/kernels/pool.c" "CMakeFiles/tessera_obj.dir/src/kernels/pool.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/pool.c.o.d"
  "/work/main/src/kernels/shape.c" "CMakeFiles/tessera_obj.dir/src/kernels/shape.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/shape.c.o.d"
  "/work/main/src/kernels/softmax.c" "CMakeFiles/tessera_obj.dir/src/kernels/softmax.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/kernels/softmax.c.o.d"
  "/work/main/src/nn/init.c" "CMakeFiles/tessera_obj.dir/src/nn/init.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/nn/init.c.o.d"
  "/work/main/src/nn/layers.c" "CMakeFiles/tessera_obj.dir/src/nn/layers.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/nn/layers.c.o.d"
  "/work/main/src/nn/params.c" "CMakeFiles/tessera_obj.dir/src/nn/params.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/nn/params.c.o.d"
  "/work/main/src/runtime/exec.c" "CMakeFiles/tessera_obj.dir/src/runtime/exec.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/runtime/exec.c.o.d"
  "/work/main/src/tensor/dtype.c" "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o.d"
  "/work/main/src/tensor/tensor.c" "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o" "gcc" "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
