/* `tessera calibrate` on a GPU (device_target: GPU; issue #29): the cluster description of this
 * machine's GPUs as one rank per GPU sees them, measured, in the keys the cost model reads:
 *   peak_flops_f32 / _bf16   square GEMMs through the plans' GEMM (ts__gpu_gemm_peak: cuBLAS where
 *                            found, else Tessera's kernel), timed with CUDA events;
 *   gemm_efficiency          a model-sized GEMM (1024 x 128 x 384, f32) against the f32 peak;
 *   mem_bandwidth            y = a x + b y over 64 MiB vectors (3 x 64 MiB moved a pass);
 *   op_overhead              a one-element kernel launched 400 times, per launch (the launch and
 *                            the smallest kernel's run: what every operator pays beyond its work);
 *   h2d_bw / d2h_bw          64 MiB copies between pinned host memory and the GPU (the batches'
 *                            path, and the staged collectives' of ranks sharing a GPU);
 *   mem_bytes                the GPU's memory;
 *   intra_bw / _latency      under mpirun -n 2 or more, all-reduces of 8 B and 16 MiB through the
 *                            device collectives (NCCL where each rank has its own GPU, else MPI
 *                            staged through pinned memory: runtime/dcoll.h); alone, the staged
 *                            path's estimate (the slower copy direction).
 * With a CONFIG, ts_calibrate_model then times the model's own operators on the GPU (CUDA events
 * around every node). Each figure is the best of several runs after a warm-up one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/gpu_kernels.h"
#include "runtime/dcoll.h"
#include "tessera/comm.h"
#include "train_impl.h"

/* seconds per call of fn over `reps` calls, the best of `tries` batches (one warm-up call first),
 * the device synchronised around each batch */
typedef int (*gpu_op)(ts__dev *d, void *user);
static int best_time(ts__dev *d, gpu_op fn, void *user, int reps, int tries, double *out) {
  int rc = fn(d, user);
  if (!rc) rc = ts__dev_sync(d);
  double best = 0;
  for (int t = 0; t < tries && !rc; t++) {
    double t0 = ts_time_now();
    for (int r = 0; r < reps && !rc; r++) rc = fn(d, user);
    if (!rc) rc = ts__dev_sync(d);
    double s = (ts_time_now() - t0) / reps;
    if (!rc && (best == 0 || s < best)) best = s;
  }
  *out = best;
  return rc;
}

typedef struct {
  void *a, *b, *c;
  int64_t n;
  ts__dcoll *x;
  ts__mm_desc mm;
} bufs;

static int op_gemm(ts__dev *d, void *u) { /* A, B at the vectors' starts, C in a's second half */
  bufs *b = u;
  return ts__gpu_gemm(d, &b->mm, TS_F32, TS_F32, b->a, b->b, NULL, (float *)b->a + (8 << 20), NULL);
}
static int op_axpby(ts__dev *d, void *u) {
  bufs *b = u;
  return ts__gpu_axpby(d, 2.0f, b->a, 0.5f, b->b, b->n, NULL);
}
static int op_tiny(ts__dev *d, void *u) {
  bufs *b = u;
  return ts__gpu_fill(d, b->b, 1.0f, 1, NULL);
}
static int op_h2d(ts__dev *d, void *u) {
  bufs *b = u;
  return ts__dev_copy(d, b->a, b->c, (size_t)b->n * sizeof(float), TS__H2D, NULL);
}
static int op_d2h(ts__dev *d, void *u) {
  bufs *b = u;
  return ts__dev_copy(d, b->c, b->a, (size_t)b->n * sizeof(float), TS__D2H, NULL);
}
static int op_allreduce(ts__dev *d, void *u) {
  bufs *b = u;
  int rc = ts__dcoll_allreduce(b->x, b->a, b->a, (size_t)b->n, TS_F32, TS_REDUCE_SUM, NULL);
  (void)d;
  return rc ? rc : ts__dcoll_wait(b->x, NULL, ts_comm_get_timeout(), "calibration all-reduce");
}

int ts_calibrate_gpu(ts_comm *world, int device_id, ts_cluster *out) {
  memset(out, 0, sizeof *out);
  ts_config probe;
  ts_config_defaults(&probe);
  probe.device_target = TS_CFG_DEVICE_GPU;
  probe.device_id = device_id;
  snprintf(probe.source, sizeof probe.source, "calibrate"); /* names the refusal */
  int id = -1, rc = ts__train_device_check(&probe, &id); /* DEVICE_ID, the local rank: as a job's */
  ts_config_free(&probe);
  if (rc) return rc;
  ts__dev *d = NULL;
  rc = ts__dev_open(TS_DEVICE_GPU, id, &d);
  if (rc) return ts_error_wrap(rc, "calibrate");
  int N = world ? ts_comm_size(world) : 1;
  snprintf(out->name, sizeof out->name, "local");
  snprintf(out->device, sizeof out->device, "%.63s", d->info.name);
  out->devices_per_node = N;
  out->nodes = 1;
  int64_t n32 = 0, n16 = 0;
  double g32 = 0, g16 = 0;
  rc = ts__gpu_gemm_peak(d, TS_F32, &n32, &g32);
  if (!rc) rc = ts__gpu_gemm_peak(d, TS_BF16, &n16, &g16);
  out->peak_flops_f32 = g32 * 1e9;
  out->peak_flops_bf16 = g16 * 1e9;
  /* the vectors: 16 Mi floats (64 MiB) on the device, twice, and pinned on the host */
  bufs b = {NULL, NULL, NULL, (int64_t)16 << 20, NULL, {1, 1024, 384, 128, 0, 0, 0, 0}};
  size_t vb = (size_t)b.n * sizeof(float);
  if (!rc) rc = ts__dev_alloc(d, vb, &b.a);
  if (!rc) rc = ts__dev_alloc(d, vb, &b.b);
  if (!rc) rc = ts__dev_host_alloc(d, vb, &b.c);
  if (!rc) memset(b.c, 0, vb);
  if (!rc) rc = ts__dev_memset0(d, b.a, vb, NULL);
  if (!rc) rc = ts__dev_memset0(d, b.b, vb, NULL);
  double s = 0;
  /* the model-sized GEMM (operands: the vectors' first elements) */
  if (!rc) rc = best_time(d, op_gemm, &b, 5, 3, &s);
  if (!rc && s > 0 && out->peak_flops_f32 > 0) {
    double r = 2.0 * 1024 * 128 * 384 / s;
    out->gemm_efficiency = r < out->peak_flops_f32 ? r / out->peak_flops_f32 : 1.0;
  }
  if (!rc) rc = best_time(d, op_axpby, &b, 3, 3, &s);
  if (!rc && s > 0) out->mem_bandwidth = 3.0 * (double)vb / s;
  if (!rc) rc = best_time(d, op_tiny, &b, 400, 3, &s);
  if (!rc) out->op_overhead = s;
  if (!rc) rc = best_time(d, op_h2d, &b, 2, 3, &s);
  if (!rc && s > 0) out->h2d_bw = (double)vb / s;
  if (!rc) rc = best_time(d, op_d2h, &b, 2, 3, &s);
  if (!rc && s > 0) out->d2h_bw = (double)vb / s;
  size_t fr = 0, tot = 0;
  if (!rc && !ts__dev_mem_info(d, &fr, &tot)) out->mem_bytes = (double)tot;
  if (!rc && !(out->mem_bytes > 0)) out->mem_bytes = 1e9;
  const char *how = "";
  if (!rc && world && N > 1) { /* the device collectives between the ranks: alpha-beta of the ring */
    rc = ts__dcoll_create(world, d, TS__DCOLL_AUTO, &b.x);
    double small = 0, big = 0;
    int64_t nb = (int64_t)4 << 20; /* 16 MiB */
    b.n = 2;
    if (!rc) rc = best_time(d, op_allreduce, &b, 20, 3, &small);
    b.n = nb;
    if (!rc) rc = best_time(d, op_allreduce, &b, 2, 3, &big);
    double steps = 2.0 * (N - 1), frac = 2.0 * (N - 1) / N;
    out->intra_latency = small / steps;
    double tb = big - steps * out->intra_latency;
    out->intra_bw = tb > 0 ? frac * (double)nb * sizeof(float) / tb : out->h2d_bw;
    how = b.x ? ts__dcoll_describe(b.x) : "";
  } else if (!rc) { /* alone: ranks sharing this GPU stage through pinned host memory */
    out->intra_bw = out->h2d_bw < out->d2h_bw ? out->h2d_bw : out->d2h_bw;
    out->intra_latency = 10e-6;
  }
  out->inter_bw = out->intra_bw;
  out->inter_latency = out->intra_latency;
  if (!rc)
    snprintf(out->source, sizeof out->source,
             "measured by tessera calibrate on %s (%d rank%s): f32 and bf16 GEMM peaks (%lld^3, %lld^3), a 1024x128x384 "
             "GEMM, a 64 MiB axpby, 400 one-element kernels, 64 MiB pinned copies each way; %s%s", d->info.name, N,
             N > 1 ? "s" : "", (long long)n32, (long long)n16,
             N > 1 ? "all-reduces of 8 B and 16 MiB through " : "links estimated (the staged path: the slower copy "
                                                                "direction, 10 us): run under mpirun -n 2 to measure them",
             how);
  ts__dcoll_free(b.x);
  ts__dev_free(d, b.a), ts__dev_free(d, b.b);
  ts__dev_host_free(d, b.c);
  ts__dev_close(d);
  if (rc) return ts_error_wrap(rc, "calibrate on the GPU");
  return ts_cluster_validate(out, "calibrate");
}
