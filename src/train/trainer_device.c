/* device_target / device_id (MindSpore's context keys) at trainer creation: the GPU asked for is
 * looked up before anything is built, and a machine without a usable one refuses the job in one
 * line naming what is missing (docs/gpu.md); the distribution object then runs the job on it
 * (src/distribution/dist_device.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/device.h"
#include "device/gpu_kernels.h"
#include "graph/graph_ir.h"
#include "train_impl.h"

/* The GPU of this process: device_id, or (-1) MindSpore's DEVICE_ID (`tessera launch` sets it to
 * the rank on its host for programs), or the local rank under mpirun, else 0; the last two modulo
 * the GPUs (ranks beyond them share one). */
static int gpu_of(const ts_config *c, int count) {
  if (c->device_id >= 0) return c->device_id;
  const char *di = getenv("DEVICE_ID");
  if (di && *di) {
    char *end;
    long v = strtol(di, &end, 10);
    if (*end || v < 0 || v > 1023) return -2; /* not an ordinal (refused by the caller) */
    return count > 0 ? (int)(v % count) : (int)v;
  }
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) lr = getenv("MPI_LOCALRANKID"); /* MPICH */
  if (!lr) lr = getenv("SLURM_LOCALID");
  int r = lr ? atoi(lr) : 0;
  return count > 0 && r >= 0 ? r % count : 0;
}

int ts__train_device_check(const ts_config *c, int *device_id) {
  *device_id = -1;
  if (c->device_target == TS_CFG_DEVICE_CPU) return TS_OK;
  const char *src = c->source[0] ? c->source : "config";
  int n = 0, rc = ts_device_count(TS_DEVICE_GPU, &n);
  ts_device_info gi;
  int id = gpu_of(c, n);
  if (id == -2)
    return ts_error_set(TS_ECONFIG, "%s: device_target GPU: DEVICE_ID '%s' (the environment's) is not a GPU "
                        "ordinal (0..1023)", src, getenv("DEVICE_ID"));
  if (!rc) rc = ts_device_query(TS_DEVICE_GPU, id, &gi);
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "%s", ts_last_error()); /* the message is rewritten below */
    return ts_error_set(TS_ECONFIG, "%s: device_target GPU: %s (device_target: CPU runs here)", src, why);
  }
  char s[256];
  ts_device_describe(&gi, s, sizeof s);
  ts_log(TS_LOG_INFO, "device_target GPU: %s", s);
  ts__gpu_set_tf32(c->float32_matmul_precision == TS_CFG_F32_HIGH); /* before any GEMM or convolution */
  *device_id = id;
  return TS_OK;
}

void ts__train_amp_note(const ts_config *c) {
  ts_device_info ci;
  if (c->device_target != TS_CFG_DEVICE_CPU || c->train.amp_level <= 0 || c->train.amp_dtype != 0 ||
      ts_device_query(TS_DEVICE_CPU, 0, &ci) || ci.bf16)
    return;
  ts_log(TS_LOG_WARN, "%s: train.amp_level O%d (bf16): this CPU computes no bf16 (oneDNN needs AVX-512 cores): "
         "its bf16 ops run as f32 kernels with conversions around them, correct but slower than amp_level O0 "
         "here (docs/mixed-precision.md); activations still take half the memory",
         c->source[0] ? c->source : "config", c->train.amp_level);
}

int ts_trainer_device_info(const ts_trainer *t, char *buf, size_t cap) {
  char dev[256];
  if (cap) buf[0] = 0;
  if (!t || !ts_dist_device_info(t->dist, dev, sizeof dev)) return 0;
  const char *gwhy = NULL, *cwhy = NULL;
  int cublas = !strcmp(ts__gpu_gemm_impl(&gwhy), "cublas"), cudnn = !strcmp(ts__gpu_conv_impl(&cwhy), "cudnn");
  char gemm[240], conv[240]; /* which library runs them, and why not where it is not used */
  snprintf(gemm, sizeof gemm, cublas ? "cuBLAS" : *gwhy ? "Tessera's kernels (%s)" : "Tessera's kernels", gwhy);
  snprintf(conv, sizeof conv, cudnn ? "cuDNN" : *cwhy ? "Tessera's kernels (%s)" : "Tessera's kernels", cwhy);
  /* channels last (runtime/run_gpu_conv.c): cuDNN's bf16 convolutions (amp O1-O3), or forced */
  const char *cl = getenv("TESSERA_GPU_CHANNELS_LAST");
  int has_conv = 0;
  const ts_graph *g = t->run ? t->run->g : NULL;
  for (int i = 0; g && i < ts_graph_num_nodes(g) && !has_conv; i++) has_conv = ts_graph_node_op(g, i) == TS_OP_CONV2D;
  const int nhwc = cudnn && has_conv && (cl && *cl ? strcmp(cl, "0") != 0 : t->cfg.train.amp_level > 0);
  snprintf(buf, cap, "%s; GEMMs: %s; convolutions: %s%s%s", dev, gemm, conv,
           nhwc ? "; the convolutions' activations NHWC (channels last)" : "",
           ts__gpu_tf32() && (cublas || cudnn) ? "; f32 on TF32 tensor cores (float32_matmul_precision: high)" : "");
  return 1;
}
