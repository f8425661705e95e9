file(REMOVE_RECURSE
  "CMakeFiles/tessera_obj.dir/src/base/log.c.o"
  "CMakeFiles/tessera_obj.dir/src/base/log.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/base/rng.c.o"
  "CMakeFiles/tessera_obj.dir/src/base/rng.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/base/status.c.o"
  "CMakeFiles/tessera_obj.dir/src/base/status.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/base/sys.c.o"
  "CMakeFiles/tessera_obj.dir/src/base/sys.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o"
  "CMakeFiles/tessera_obj.dir/src/kernels/dnnl_ctx.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o"
  "CMakeFiles/tessera_obj.dir/src/tensor/dtype.c.o.d"
  "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o"
  "CMakeFiles/tessera_obj.dir/src/tensor/tensor.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tessera_obj.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
