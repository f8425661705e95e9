/* `tessera calibrate`: the cluster description of this machine (include/tessera/planner.h), measured:
 * the GEMM peak (the best of 512^3 sgemms) and the fraction a model-sized GEMM reaches, the
 * bandwidth of a memory-bound pass, and, on 2 or more ranks, the all-reduce latency and bandwidth
 * between them (alpha-beta from a small and a large message). One host: the links between nodes
 * are taken equal to those inside. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/matmul.h"
#include "tessera/comm.h"
#include "train_impl.h"

/* GFLOP/s of n x k by k x m sgemms, the best of 5 batches. */
static double gemm_rate(int64_t n, int64_t k, int64_t m) {
  float *a = malloc(sizeof(float) * (size_t)(n * k + k * m + n * m));
  if (!a) return 0;
  float *b = a + n * k, *c = b + k * m;
  for (int64_t i = 0; i < n * k + k * m; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  ts__mm_desc d = {1, n, m, k, 0, 0, 0, 0};
  double best = 0;
  if (!ts__matmul_dnnl(&d, a, b, c))
    for (int rep = 0; rep < 5; rep++) {
      int it = 0;
      double t0 = ts_time_now(), dt = 0;
      do {
        ts__matmul_dnnl(&d, a, b, c);
        it++;
        dt = ts_time_now() - t0;
      } while (dt < 0.05);
      double gf = 2.0 * (double)(n * k * m) * it / dt / 1e9;
      best = gf > best ? gf : best;
    }
  free(a);
  return best;
}

/* Bytes/s of y = 2 x + 1 over 64 MiB (read + write), the best of 5. */
static double mem_rate(void) {
  size_t n = (size_t)16 << 20;
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
  double best = 0;
  if (x && y) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(i & 1023);
    for (int rep = 0; rep < 5; rep++) {
      double t0 = ts_time_now();
#pragma omp parallel for
      for (size_t i = 0; i < n; i++) y[i] = 2 * x[i] + 1;
      double dt = ts_time_now() - t0, r = dt > 0 ? 2.0 * (double)n * sizeof(float) / dt : 0;
      best = r > best ? r : best;
    }
  }
  free(x);
  free(y);
  return best;
}

/* Median seconds of an all-reduce of n floats over w. */
static int allreduce_time(ts_comm *w, size_t n, double *out) {
  float *buf = calloc(n ? n : 1, sizeof(float));
  if (!buf) return ts_error_set(TS_ENOMEM, "calibrate: out of memory");
  double t[9];
  int rc = ts_comm_allreduce(w, buf, buf, n, TS_F32, TS_REDUCE_SUM); /* warm-up */
  for (int k = 0; k < 9 && !rc; k++) {
    rc = ts_comm_barrier(w);
    double t0 = ts_time_now();
    if (!rc) rc = ts_comm_allreduce(w, buf, buf, n, TS_F32, TS_REDUCE_SUM);
    t[k] = ts_time_now() - t0;
  }
  free(buf);
  if (rc) return rc;
  for (int i = 1; i < 9; i++) /* insertion sort */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double s = t[j];
      t[j] = t[j - 1];
      t[j - 1] = s;
    }
  float med = (float)t[4];
  rc = ts_comm_allreduce(w, &med, &med, 1, TS_F32, TS_REDUCE_MAX); /* every rank the same figure */
  *out = med;
  return rc;
}

/* Seconds per operator beyond its work: 32 blocks of dense (64x32 by 32x32), layer norm and gelu,
 * whose work is a microsecond or less: what remains is the dispatch every operator of a model pays
 * (the executor, oneDNN primitives, OpenMP regions). The best of 5 runs after the first. */
static double op_overhead(void) {
  ts_graph *g = NULL;
  ts_plan *p = NULL;
  double best = 0;
  enum { R = 64, C = 32, L = 32 };
  if (ts_graph_create(&g)) return 0;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(R, C)), w = ts_input(g, "w", TS_F32, ts_shape2(C, C));
  ts_val gm = ts_input(g, "g", TS_F32, ts_shape1(C)), bt = ts_input(g, "b", TS_F32, ts_shape1(C)), h = x;
  for (int k = 0; k < L; k++) h = ts_gelu(g, ts_layernorm(g, ts_dense(g, h, w, TS_NONE), gm, bt, 1e-5f), 0);
  float *buf = calloc((size_t)(R * C + C * C + 2 * C), sizeof(float));
  if (buf && !ts_graph_status(g) && !ts_plan_create(g, &h, 1, &p) && !ts_plan_bind(p, x, buf) &&
      !ts_plan_bind(p, w, buf + R * C) && !ts_plan_bind(p, gm, buf + R * C + C * C) &&
      !ts_plan_bind(p, bt, buf + R * C + C * C + C))
    for (int rep = 0; rep < 6; rep++) {
      double t0 = ts_time_now();
      if (ts_plan_run(p, 0)) break;
      double dt = (ts_time_now() - t0) / (3 * L);
      if (rep && (best == 0 || dt < best)) best = dt; /* the first run plans */
    }
  free(buf);
  ts_plan_free(p);
  ts_graph_free(g);
  return best;
}

int ts_calibrate(ts_comm *world, ts_cluster *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "local");
  snprintf(out->device, sizeof out->device, "CPU (%ld cores)", sysconf(_SC_NPROCESSORS_ONLN));
  int N = world ? ts_comm_size(world) : 1;
  out->devices_per_node = N;
  out->nodes = 1;
  double peak = ts__train_peak_gflops() * 1e9, model = gemm_rate(1024, 128, 384) * 1e9;
  out->peak_flops_f32 = peak;
  out->peak_flops_bf16 = 0;
  out->gemm_efficiency = peak > 0 ? (model < peak ? model / peak : 1.0) : 0;
  out->mem_bandwidth = mem_rate();
  out->op_overhead = op_overhead();
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  out->mem_bytes = pages > 0 && psz > 0 ? (double)pages * (double)psz / N : 1e9;
  if (world && N > 1) {
    double small = 0, big = 0;
    size_t nb = (size_t)4 << 20; /* 16 MiB */
    int rc = allreduce_time(world, 2, &small);
    if (!rc) rc = allreduce_time(world, nb, &big);
    if (rc) return ts_error_wrap(rc, "calibrate: timing all-reduces");
    double steps = 2.0 * (N - 1), frac = 2.0 * (N - 1) / N;
    out->intra_latency = small / steps;
    double tb = big - steps * out->intra_latency;
    out->intra_bw = tb > 0 ? frac * (double)nb * sizeof(float) / tb : out->mem_bandwidth;
    snprintf(out->source, sizeof out->source,
             "measured by tessera calibrate on %d ranks: sgemm 512^3 peak, a 1024x128x384 GEMM, a 64 MiB "
             "memory pass, 96 small operators, all-reduces of 8 B and 16 MiB; links between nodes set equal (one host)", N);
  } else {
    out->intra_bw = out->mem_bandwidth / 2; /* a copy through shared memory */
    out->intra_latency = 2e-6;
    snprintf(out->source, sizeof out->source,
             "measured by tessera calibrate on 1 process: sgemm 512^3 peak, a 1024x128x384 GEMM, a 64 MiB memory "
             "pass; links estimated (half the memory bandwidth, 2 us): run under mpirun -n 2 to measure them");
  }
  out->inter_bw = out->intra_bw;
  out->inter_latency = out->intra_latency;
  return ts_cluster_validate(out, "calibrate");
}
