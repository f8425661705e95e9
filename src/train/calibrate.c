/* `tessera calibrate`: the cluster description of this machine (src/planner/planner.h), measured:
 * the GEMM peak (the best of 512^3 sgemms) and the fraction a model-sized GEMM reaches, the
 * bandwidth of a memory-bound pass, and, on 2 or more ranks, the all-reduce latency and bandwidth
 * between them (alpha-beta from a small and a large message). Several hosts: the links inside a
 * host and between hosts measured apart (ts_comm_topo). One host: the links between nodes are
 * taken equal to those inside. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/exec.h"
#include "planner/planner.h"
#include "graph/graph_ir.h"
#include "../kernels/matmul.h"
#include "tessera/comm.h"
#include "train_compat.h"
#include "train_impl.h"

/* GFLOP/s of n x k by k x m matmuls in dtype dt (f32: oneDNN's sgemm path; bf16: its bf16
 * kernels, emulated where the CPU lacks them), the best of 5 batches; 0 where the kernel fails. */
static double gemm_rate(int64_t n, int64_t k, int64_t m, ts_dtype dt) {
  size_t es = ts_dtype_size(dt), na = (size_t)(n * k + k * m);
  char *a = malloc(es * (na + (size_t)(n * m)));
  if (!a) return 0;
  char *b = a + es * (size_t)(n * k), *c = b + es * (size_t)(k * m);
  for (size_t i = 0; i < na; i++) {
    float v = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    if (dt == TS_F32) memcpy(a + 4 * i, &v, 4);
    else ts_convert(&v, TS_F32, a + es * i, dt, 1);
  }
  ts__mm_desc d = {1, n, m, k, 0, 0, 0, 0};
  double best = 0;
#define RUN() (dt == TS_F32 ? ts__matmul_dnnl(&d, (float *)a, (float *)b, (float *)c) : ts__matmul_lp_dnnl(&d, dt, a, b, c))
  if (!RUN())
    for (int rep = 0; rep < 5; rep++) {
      int it = 0;
      double t0 = ts_time_now(), dt_s = 0;
      do {
        RUN();
        it++;
        dt_s = ts_time_now() - t0;
      } while (dt_s < 0.05);
      double gf = 2.0 * (double)(n * k * m) * it / dt_s / 1e9;
      best = gf > best ? gf : best;
    }
#undef RUN
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

/* ---- the links between hosts (docs/cluster.md) ----
 * Measured as they are used: a flat all-reduce over every rank and the hierarchical one, whose three
 * parts (the all-reduce inside each host, the one between the hosts' leaders, the broadcast inside
 * each host) are timed apart, at 1, 4, 16 and 64 MiB, flat and hierarchical alternating;
 * medians per size, then one alpha-beta line per collective fitted over the sizes
 * (ts_cluster_fit_alpha_beta, relative errors). The lines are turned into the description's
 * per-round figures by the rounds of the algorithm OpenMPI runs for Tessera's in-place
 * non-blocking all-reduce (libnbc's binomial tree: ts_cluster_allreduce_hier), so the model
 * reproduces each part; the flat one is kept as measured (flat_allreduce_*). */
#define NFIT 4
static const double k_fit_mib[NFIT] = {1, 4, 16, 64};

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One hierarchical all-reduce of n floats, its parts timed: part[0..2] = the slowest rank's end of
 * the all-reduce inside the hosts, of the leaders' one, of the broadcast, each from the previous
 * end (the first from the barrier). */
static int hier_once(ts_comm *w, ts_comm_topo *t, float *buf, size_t n, double part[3]) {
  int rc = ts_comm_barrier(w);
  double e[4] = {0};
  e[0] = ts_time_now();
  if (!rc) rc = ts_comm_allreduce(ts_comm_topo_node(t), buf, buf, n, TS_F32, TS_REDUCE_SUM);
  e[1] = ts_time_now();
  if (!rc && ts_comm_topo_leaders(t)) rc = ts_comm_allreduce(ts_comm_topo_leaders(t), buf, buf, n, TS_F32, TS_REDUCE_SUM);
  e[2] = ts_time_now();
  if (!rc) rc = ts_comm_broadcast(ts_comm_topo_node(t), buf, n, TS_F32, 0);
  e[3] = ts_time_now();
  if (rc) return rc;
  float m[3] = {(float)(e[1] - e[0]), (float)(e[2] - e[0]), (float)(e[3] - e[0])}; /* from each rank's barrier */
  rc = ts_comm_allreduce(w, m, m, 3, TS_F32, TS_REDUCE_MAX);
  if (rc) return rc;
  part[0] = m[0];
  part[1] = m[1] - m[0];
  part[2] = m[2] - m[1];
  for (int i = 0; i < 3; i++)
    if (part[i] < 1e-9) part[i] = 1e-9;
  return TS_OK;
}

/* One flat all-reduce of n floats from a barrier, as the gradient buckets issue it (non-blocking,
 * polled to completion): in place, or (snd) from a separate send buffer the data is copied into
 * first; the slowest rank's seconds. */
static int flat_once(ts_comm *w, float *buf, float *snd, size_t n, double *out) {
  int rc = ts_comm_barrier(w);
  double t0 = ts_time_now();
  ts_comm_req *q = NULL;
  if (!rc && snd) memcpy(snd, buf, n * sizeof(float));
  if (!rc) rc = ts_comm_iallreduce(w, snd ? snd : buf, buf, n, TS_F32, TS_REDUCE_SUM, &q);
  if (!rc) rc = ts_comm_wait(q);
  ts_comm_req_free(q);
  float dt = (float)(ts_time_now() - t0);
  if (!rc) rc = ts_comm_allreduce(w, &dt, &dt, 1, TS_F32, TS_REDUCE_MAX);
  *out = dt;
  return rc;
}

/* One hierarchical all-reduce of n floats as the gradient buckets run it (non-blocking, its three
 * steps chained as each completes: ts_comm_iallreduce_hier), waited from a barrier; the slowest
 * rank's seconds. */
static int hier_nb_once(ts_comm *w, ts_comm_topo *t, float *buf, size_t n, double *out) {
  int rc = ts_comm_barrier(w);
  double t0 = ts_time_now();
  ts_comm_hier_req *q = NULL;
  if (!rc) rc = ts_comm_iallreduce_hier(t, buf, n, TS_F32, TS_REDUCE_SUM, &q);
  if (!rc) rc = ts_comm_hier_wait(q);
  ts_comm_hier_req_free(q);
  float dt = (float)(ts_time_now() - t0);
  if (!rc) rc = ts_comm_allreduce(w, &dt, &dt, 1, TS_F32, TS_REDUCE_MAX);
  *out = dt;
  return rc;
}

/* One collective of optimizer sharding on n floats (equal parts), in place, as its buckets issue it,
 * waited from a barrier: the reduce-scatter of the gradients (ag 0) or the all-gather of the updated
 * parameters (ag 1), MPI's non-blocking one or (ring) the ring of point-to-point steps; the slowest
 * rank's seconds. */
static int zero_coll_once(ts_comm *w, float *buf, size_t n, int ag, int ring, double *out) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t *counts = malloc(sizeof(size_t) * (size_t)N), at = 0;
  if (!counts) return ts_error_set(TS_ENOMEM, "calibrate: out of memory");
  ts_comm_block_counts(n, N, counts);
  for (int r = 0; r < R; r++) at += counts[r];
  int rc = ts_comm_barrier(w);
  double t0 = ts_time_now();
  if (ring) {
    ts_comm_ring_req *q = NULL;
    if (!rc) rc = ag ? ts_comm_iallgatherv_ring(w, buf + at, buf, counts, NULL, TS_F32, 0, &q)
                     : ts_comm_ireduce_scatter_ring(w, buf, buf + at, counts, TS_F32, TS_REDUCE_SUM, 0, &q);
    if (!rc) rc = ts_comm_ring_wait(q);
    ts_comm_ring_req_free(q);
  } else {
    ts_comm_req *q = NULL;
    if (!rc) rc = ag ? ts_comm_iallgatherv(w, buf + at, buf, counts, NULL, TS_F32, &q)
                     : ts_comm_ireduce_scatter(w, buf, buf + at, counts, TS_F32, TS_REDUCE_SUM, &q);
    if (!rc) rc = ts_comm_wait(q);
    ts_comm_req_free(q);
  }
  free(counts);
  float dt = (float)(ts_time_now() - t0);
  if (!rc) rc = ts_comm_allreduce(w, &dt, &dt, 1, TS_F32, TS_REDUCE_MAX);
  *out = dt;
  return rc;
}

/* Several hosts (ts_comm_topo, the same number of ranks on each, consecutive): 1 when measured,
 * 0 when the job is on one host (or hosts differ). */
static int calibrate_hosts(ts_comm *world, ts_cluster *out, int *measured) {
  *measured = 0;
  ts_comm_topo *t = NULL;
  int rc = ts_comm_topo_create(world, &t);
  if (rc) return rc;
  int H = ts_comm_topo_num_hosts(t), N = ts_comm_size(world), L = H > 0 ? N / H : N;
  if (H < 2 || !ts_comm_topo_uniform(t)) {
    ts_comm_topo_free(t);
    return TS_OK;
  }
  size_t nmax = (size_t)(k_fit_mib[NFIT - 1] * 1024 * 1024 / sizeof(float));
  float *buf = calloc(nmax, sizeof(float)), *snd = calloc(nmax, sizeof(float));
  if (!buf || !snd) {
    free(buf);
    free(snd);
    ts_comm_topo_free(t);
    return ts_error_set(TS_ENOMEM, "calibrate: out of memory (%zu floats)", nmax);
  }
  double bytes[NFIT], med[10][NFIT]; /* flat, inside, leaders, broadcast, flat from a send buffer, hierarchical
                                         non-blocking (chained) whole, MPI's reduce-scatter, the ring's, MPI's
                                         all-gather, the ring's */
  double part[3], f = 0;
  rc = flat_once(world, buf, NULL, (size_t)1 << 16, &f); /* warm-up: connections, buffers */
  if (!rc) rc = flat_once(world, buf, snd, (size_t)1 << 16, &f);
  if (!rc) rc = hier_once(world, t, buf, (size_t)1 << 16, part);
  for (int k = 0; k < NFIT && !rc; k++) {
    size_t n = (size_t)(k_fit_mib[k] * 1024 * 1024 / sizeof(float));
    bytes[k] = (double)n * sizeof(float);
    int reps = k_fit_mib[k] >= 16 ? 3 : 5;
    double v[10][5];
    for (int r = 0; r < reps && !rc; r++) { /* flat, hierarchical and flat from a send buffer alternating */
      if (r % 2 == 0) rc = flat_once(world, buf, NULL, n, &v[0][r]);
      if (!rc && r % 2 == 1) rc = flat_once(world, buf, snd, n, &v[4][r]);
      if (!rc) rc = hier_once(world, t, buf, n, part);
      if (!rc) rc = hier_nb_once(world, t, buf, n, &v[5][r]);
      for (int ag = 0; ag < 2 && !rc; ag++) { /* MPI's and the ring's alternating first */
        rc = zero_coll_once(world, buf, n, ag, r % 2, &v[6 + 2 * ag + r % 2][r]);
        if (!rc) rc = zero_coll_once(world, buf, n, ag, !(r % 2), &v[6 + 2 * ag + !(r % 2)][r]);
      }
      if (!rc && r % 2 == 0) rc = flat_once(world, buf, snd, n, &v[4][r]);
      if (!rc && r % 2 == 1) rc = flat_once(world, buf, NULL, n, &v[0][r]);
      for (int i = 0; i < 3; i++) v[i + 1][r] = part[i];
    }
    for (int i = 0; i < 10 && !rc; i++) {
      qsort(v[i], (size_t)reps, sizeof(double), cmp_dbl);
      med[i][k] = v[i][reps / 2];
    }
    if (!rc && ts_comm_rank(world) == 0)
      ts_log(TS_LOG_INFO, "calibrate: %g MiB: flat all-reduce %.2f ms in place, %.2f ms from a separate send buffer; "
             "hierarchical: inside %.2f + leaders %.2f + broadcast %.2f ms, chained non-blocking %.2f ms; reduce-scatter "
             "%.2f ms MPI's, %.2f ms the ring's; all-gather %.2f ms MPI's, %.2f ms the ring's", k_fit_mib[k],
             1e3 * med[0][k], 1e3 * med[4][k], 1e3 * med[1][k], 1e3 * med[2][k], 1e3 * med[3][k], 1e3 * med[5][k],
             1e3 * med[6][k], 1e3 * med[7][k], 1e3 * med[8][k], 1e3 * med[9][k]);
  }
  free(buf);
  free(snd);
  double a[10] = {0}, b[10] = {0};
  for (int i = 0; i < 10 && !rc; i++) {
    if ((i == 1 || i == 3) && L < 2) continue; /* one rank a host: nothing inside */
    rc = ts_cluster_fit_alpha_beta(bytes, med[i], NFIT, &a[i], &b[i]);
    if (rc) {
      static const char *what[10] = {"the flat all-reduce", "the all-reduce inside a host", "the all-reduce between hosts",
                                     "the broadcast inside a host", "the flat all-reduce from a send buffer",
                                     "the non-blocking hierarchical all-reduce", "MPI's reduce-scatter",
                                     "the ring reduce-scatter", "MPI's all-gather", "the ring all-gather"};
      rc = ts_error_wrap(rc, "calibrate: %s", what[i]);
    }
  }
  if (!rc) {
    int rl = 0, rh = 0;
    while ((1 << rl) < L) rl++;
    while ((1 << rh) < H) rh++;
    out->devices_per_node = L;
    out->nodes = H;
    if (L > 1) { /* binomial inside: 2 rl rounds of the whole message; broadcast rl rounds */
      out->intra_latency = a[1] / (2 * rl);
      out->intra_bw = 2 * rl / b[1];
      out->intra_bcast_latency = a[3] / rl;
      out->intra_bcast_bw = rl / b[3];
    } else {
      out->intra_latency = 2e-6;
      out->intra_bw = out->mem_bandwidth / 2;
    }
    double link = 2 * rh / b[2];
    out->inter_latency = a[2] / (2 * rh);
    out->inter_bw = link / L;
    out->flat_allreduce_latency = L > 1 ? a[0] : 0;
    out->flat_allreduce_bw = L > 1 ? 1 / b[0] : 0;
    /* both flat variants as measured, so that the reducer's choice per bucket size compares like
     * with like (with one rank a host the in-place one is priced from the links above) */
    out->flat_allreduce_send_latency = a[4];
    out->flat_allreduce_send_bw = 1 / b[4];
    /* the hierarchical one as the buckets run it (chained non-blocking steps, libnbc's inside each
     * host): what the reducer's choice prices; the parts above stay the links' figures */
    out->hier_allreduce_latency = a[5];
    out->hier_allreduce_bw = 1 / b[5];
    /* optimizer sharding's reduce-scatters, both as measured: parallel.reduce_scatter auto's choice */
    out->reduce_scatter_latency = a[6];
    out->reduce_scatter_bw = 1 / b[6];
    out->reduce_scatter_ring_latency = a[7];
    out->reduce_scatter_ring_bw = 1 / b[7];
    /* and the all-gathers of the updated parameters after them (the predicted step prices both) */
    out->allgather_latency = a[8];
    out->allgather_bw = 1 / b[8];
    out->allgather_ring_latency = a[9];
    out->allgather_ring_bw = 1 / b[9];
    if (L < 2) {
      out->flat_allreduce_latency = a[0];
      out->flat_allreduce_bw = 1 / b[0];
    }
    char desc[400];
    const char *alg = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    snprintf(out->source, sizeof out->source,
             "measured by tessera calibrate on %d ranks of %s: sgemm and bf16 512^3 peaks, a 1024x128x384 GEMM, a 64 MiB "
             "memory pass, 96 small operators; flat (in place and from a separate send buffer) and hierarchical (blocking parts and "
             "chained non-blocking whole) all-reduces, reduce-scatters and all-gathers (MPI's, the ring's) of 1-64 MiB, "
             "alpha-beta per part fitted over the sizes (the node's link %.3g GB/s, inter_bw its share per device; libnbc iallreduce "
             "algorithm %s)",
             N, ts_comm_topo_describe(t, desc, sizeof desc), link / 1e9, alg && *alg ? alg : "default");
    *measured = 1;
  }
  ts_comm_topo_free(t);
  return rc;
}

int ts_calibrate(ts_comm *world, ts_cluster *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "local");
  snprintf(out->device, sizeof out->device, "CPU (%ld cores)", sysconf(_SC_NPROCESSORS_ONLN));
  int N = world ? ts_comm_size(world) : 1;
  out->devices_per_node = N;
  out->nodes = 1;
  double peak = ts__train_peak_gflops() * 1e9, model = gemm_rate(1024, 128, 384, TS_F32) * 1e9;
  out->peak_flops_f32 = peak;
  out->peak_flops_bf16 = gemm_rate(512, 512, 512, TS_BF16) * 1e9; /* emulated where the CPU lacks bf16: measured all the same */
  out->gemm_efficiency = peak > 0 ? (model < peak ? model / peak : 1.0) : 0;
  out->mem_bandwidth = mem_rate();
  out->op_overhead = op_overhead();
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  out->mem_bytes = pages > 0 && psz > 0 ? (double)pages * (double)psz / N : 1e9;
  int hosts = 0;
  if (world && N > 1) {
    int rc = calibrate_hosts(world, out, &hosts);
    if (rc) return ts_error_wrap(rc, "calibrate: timing all-reduces inside and between hosts");
  }
  if (hosts) {
    /* measured inside and between hosts */
  } else if (world && N > 1) {
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
             "measured by tessera calibrate on %d ranks: sgemm and bf16 512^3 peaks, a 1024x128x384 GEMM, a 64 MiB "
             "memory pass, 96 small operators, all-reduces of 8 B and 16 MiB; links between nodes set equal (one host)", N);
  } else {
    out->intra_bw = out->mem_bandwidth / 2; /* a copy through shared memory */
    out->intra_latency = 2e-6;
    snprintf(out->source, sizeof out->source,
             "measured by tessera calibrate on 1 process: sgemm and bf16 512^3 peaks, a 1024x128x384 GEMM, a 64 MiB memory "
             "pass; links estimated (half the memory bandwidth, 2 us): run under mpirun -n 2 to measure them");
  }
  if (!hosts) {
    out->inter_bw = out->intra_bw;
    out->inter_latency = out->intra_latency;
  }
  return ts_cluster_validate(out, "calibrate");
}

/* ---- the model's own operators ---- */

typedef struct {
  int64_t from_step; /* steps before are warm-up */
  double t0;
  ts_calibration_report r;
  const ts_cluster *c;
  double peak_s[3]; /* per family: FLOPs / the peak of each node's dtype, summed */
  int64_t fam_nodes[3];
  int dev; /* a plan on a GPU: each node's span from CUDA events (NODE_TIMED), not the host's clock */
} model_timer;

static int family_of(ts_op op) {
  switch (op) {
    case TS_OP_MATMUL: case TS_OP_DENSE: return 0;
    case TS_OP_CONV2D: case TS_OP_CONV2D_BWD_DATA: case TS_OP_CONV2D_BWD_WEIGHT: return 1;
    case TS_OP_ATTENTION: case TS_OP_ATTENTION_BWD: return 2;
    default: return -1;
  }
}

static double node_bytes(const ts_graph *g, int j) {
  double b = 0;
  for (int k = 0; k < ts_graph_node_num_inputs(g, j); k++) {
    int v = ts_graph_node_input(g, j, k);
    b += (double)ts_shape_numel(ts_graph_value_shape(g, v)) * (double)ts_dtype_size(ts_graph_value_dtype(g, v));
  }
  for (int k = 0; k < ts_graph_node_num_outputs(g, j); k++) {
    int v = ts_graph_node_output(g, j, k);
    b += (double)ts_shape_numel(ts_graph_value_shape(g, v)) * (double)ts_dtype_size(ts_graph_value_dtype(g, v));
  }
  return b;
}

static void model_hook(const ts_hook_info *e, void *user) {
  model_timer *m = user;
  if ((int64_t)e->step < m->from_step) return;
  double now = ts_time_now();
  if (e->event == TS_HOOK_RUN_BEGIN) m->r.plan_s -= now;
  if (e->event == TS_HOOK_RUN_END) {
    m->r.plan_s += now;
    m->r.steps++;
  }
  if (e->event == TS_HOOK_NODE_BEGIN) m->t0 = now;
  if (e->event != (m->dev ? TS_HOOK_NODE_TIMED : TS_HOOK_NODE_END)) return;
  const ts_graph *g = e->g;
  ts_op op = ts_graph_node_op(g, e->node);
  double dt = m->dev ? e->t1 - e->t0 : now - m->t0;
  int f = family_of(op);
  if (f >= 0) {
    double fl = ts_graph_node_flops(g, e->node);
    ts_dtype d = ts_graph_value_dtype(g, ts_graph_node_input(g, e->node, 0));
    int low = (d == TS_BF16 || d == TS_F16) && m->c->peak_flops_bf16 > 0;
    m->r.family_s[f] += dt;
    m->r.family_flops[f] += fl;
    m->fam_nodes[f]++;
    m->peak_s[f] += fl / (low ? m->c->peak_flops_bf16 : m->c->peak_flops_f32);
  } else if (ts_graph_value_alias_of(g, ts_graph_node_output(g, e->node, 0)) < 0) {
    m->r.other_s += dt;
    m->r.other_bytes += node_bytes(g, e->node);
    m->r.other_nodes++;
  }
}

static int stop_after(ts_trainer *t, const ts_step_info *s, void *last) {
  if (s->step >= *(const int64_t *)last) ts_trainer_request_stop(t);
  return TS_OK;
}

int ts_calibrate_model(const ts_config *cfg_in, int warmup, int steps, ts_cluster *c, ts_calibration_report *rep) {
  if (!cfg_in || !c || warmup < 0 || steps < 1)
    return ts_error_set(TS_EINVAL, "ts_calibrate_model: bad arguments (warmup %d, steps %d)", warmup, steps);
  ts_config cfg = *cfg_in;
  /* one device's view of the model: no layout, no pipeline, nothing written */
  cfg.parallel.mode = TS_PARALLEL_STAND_ALONE;
  ts__config_set_layout(&cfg, 1, 0);
  cfg.parallel.micro_batches = 0;
  cfg.parallel.strategies.n = 0;
  cfg.checkpoint.dir[0] = 0;
  cfg.checkpoint.resume[0] = 0;
  cfg.log.metrics[0] = 0;
  cfg.log.tensorboard[0] = 0;
  cfg.log.progress = TS_PROGRESS_OFF;
  cfg.train.eval_every = -1;
  if (cfg.train.steps > 0 && cfg.train.steps < (int64_t)warmup + steps) cfg.train.steps = (int64_t)warmup + steps;
  model_timer m;
  memset(&m, 0, sizeof m);
  m.c = c;
  m.from_step = warmup; /* plan steps count from 0: step k runs as k */
  int64_t last = (int64_t)warmup + steps;
  ts_trainer *t = NULL;
  int rc = ts_trainer_create(&cfg, &t);
  if (!rc) rc = ts_plan_add_hook(ts_trainer_plan_handle(t), model_hook, &m);
  /* on a GPU each node's time is its span on the device (the host only queues the launches) */
  if (!rc && ts_plan_device(ts_trainer_plan_handle(t))) {
    m.dev = 1;
    rc = ts_plan_set_device_timing(ts_trainer_plan_handle(t), 1);
  }
  ts_callback stop = {"calibrate_window", stop_after, NULL, NULL, NULL, &last};
  if (!rc) rc = ts_trainer_add_callback(t, &stop);
  if (!rc) rc = ts_trainer_fit(t);
  if (!rc) {
    const ts_plan *pl = ts_trainer_plan_handle(t);
    const ts_graph *g = t->run->g;
    int n = ts_graph_num_nodes(g);
    char *live = malloc((size_t)n + 1);
    if (!live) rc = ts_error_set(TS_ENOMEM, "calibrate: out of memory");
    for (int j = 0; !rc && j < n; j++) {
      int l = ts_plan_node_live(pl, j);
      if (l < 0) rc = l;
      else live[j] = (char)(l > 0);
    }
    if (m.r.steps < 1)
      rc = ts_error_set(TS_ECONFIG, "calibrate: the config trains no step beyond the %d warm-up ones", warmup);
    steps = m.r.steps > 0 ? m.r.steps : 1;
    double *per[] = {&m.r.family_s[0], &m.r.family_s[1], &m.r.family_s[2], &m.r.family_flops[0], &m.r.family_flops[1],
                     &m.r.family_flops[2], &m.r.other_s, &m.r.other_bytes, &m.r.plan_s, &m.peak_s[0], &m.peak_s[1],
                     &m.peak_s[2]};
    for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) *per[i] /= steps;
    m.r.other_nodes /= steps;
    double *eff[] = {&c->efficiency_matmul, &c->efficiency_conv, &c->efficiency_attention};
    for (int f = 0; f < 3; f++) { /* the cost model adds op_overhead to every operator: net of it, */
      double net = m.r.family_s[f] - (double)m.fam_nodes[f] / steps * c->op_overhead;
      if (!(net > 0)) net = m.r.family_s[f]; /* unless the overhead estimate exceeds the family's time */
      if (net > 0 && m.peak_s[f] > 0) *eff[f] = m.peak_s[f] / net < 1 ? m.peak_s[f] / net : 1;
    }
    double net = m.r.other_s - (double)m.r.other_nodes * c->op_overhead;
    if (m.r.other_bytes > 0 && net > 0) c->mem_bandwidth = m.r.other_bytes / net;
    ts_cost_breakdown b;
    if (!rc) rc = ts_cost_graph(c, g, TS_F32, live, &b);
    if (!rc) m.r.predicted_s = b.compute_s;
    free(live);
    size_t len = strlen(c->source);
    snprintf(c->source + len, sizeof c->source - len, "; families and bandwidth on the operators of a %s (batch %d)",
             ts_model_kind_name(cfg.model.name), cfg.train.micro_batch_size);
  }
  if (t) ts_plan_remove_hook(ts_trainer_plan_handle(t), model_hook, &m);
  ts_trainer_free(t);
  if (!rc) rc = ts_cluster_validate(c, "calibrate");
  if (rep) *rep = m.r;
  return rc;
}
