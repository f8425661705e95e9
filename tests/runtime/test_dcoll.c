/* Collectives on device buffers (src/runtime/dcoll.c) against serial references, under mpirun
 * with the stand-in driver (tests/device/fake_cuda.c: device memory is host memory) and the
 * stand-in NCCL (tests/device/fake_nccl.c: its ranks meet in shared memory):
 *   - every rank on GPU 0 (FAKE_CUDA_COUNT=1): auto chooses MPI staged through pinned memory,
 *     naming the ranks that share the GPU; comm_backend nccl is refused naming them;
 *   - a GPU per rank (FAKE_CUDA_COUNT = ranks, rank r on GPU r): auto chooses NCCL (the stand-in
 *     counts its calls); comm_backend mpi stages; NCCL failing to start on every rank
 *     (FAKE_NCCL_INIT_FAIL): auto falls back to MPI saying why, nccl is refused;
 *   - a CPU device: MPI directly.
 * Each backend runs all-reduce (sum, max, mean; in place and not), all-gather (in place and
 * not), reduce-scatter, broadcast, all-to-all and a send/receive pair of unequal lengths in f32,
 * bf16, i32, i64, at sizes 0, 1, 1000 and 4099 elements, with 256-byte and 4096-byte staging
 * chunks (so chunks are crossed, partial and single). Inputs are small integers: every result is
 * exact in every dtype, so the comparisons are exact (mean: within one rounding). A plan's
 * collective nodes on the GPU (ts_plan_set_dcoll) against the same plan on the CPU, bitwise.
 *   test_dcoll               the real driver and NCCL: rank r on GPU r mod count, auto (NCCL
 *                            when every rank has a GPU of its own), then mpi (SKIPPED without a GPU)
 *   test_dcoll fake          the cases above (TESSERA_LIBCUDA, TESSERA_LIBNCCL: the stand-ins)
 *   test_dcoll fake-nonccl   TESSERA_LIBNCCL names no library: auto stages saying NCCL is not
 *                            found, nccl is refused naming the rank and the library
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/nccl.h"
#include "runtime/dcoll.h"
#include "runtime/exec.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "tessera/comm.h"
#include "test_util.h"

static int R, P;
static ts_comm *W;

static const ts_dtype k_dt[] = {TS_F32, TS_BF16, TS_I32, TS_I64};
static const size_t k_sizes[] = {0, 1, 1000, 4099};

static int val(int s, size_t i) { return (int)(((size_t)s * 31 + i * 7 + (i / 5) * 3) % 33) - 16; }

static void put(ts_dtype dt, void *b, size_t i, double v) {
  switch (dt) {
    case TS_F32: ((float *)b)[i] = (float)v; break;
    case TS_BF16: ((uint16_t *)b)[i] = ts_f32_to_bf16((float)v); break;
    case TS_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    case TS_I64: ((int64_t *)b)[i] = (int64_t)v; break;
    default: break;
  }
}

static double get(ts_dtype dt, const void *b, size_t i) {
  switch (dt) {
    case TS_F32: return ((const float *)b)[i];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)b)[i]);
    case TS_I32: return ((const int32_t *)b)[i];
    case TS_I64: return (double)((const int64_t *)b)[i];
    default: return 0;
  }
}

/* a device buffer of n elements of dt holding f(i) (host copy in *h, freed by the caller) */
typedef struct {
  ts__dev *d;
  void *p;
  size_t bytes;
} dbuf;

static dbuf dnew(ts__dev *d, size_t bytes) {
  dbuf b = {d, NULL, bytes};
  CHECK_OK(ts__dev_alloc(d, bytes ? bytes : 16, &b.p));
  CHECK_OK(ts__dev_memset0(d, b.p, bytes ? bytes : 16, NULL));
  return b;
}
static void dput(dbuf *b, const void *h) {
  if (b->bytes) CHECK_OK(ts__dev_copy(b->d, b->p, h, b->bytes, TS__H2D, NULL));
  CHECK_OK(ts__dev_sync(b->d));
}
static void *dget(const dbuf *b) {
  void *h = calloc(1, b->bytes ? b->bytes : 1);
  if (b->bytes) CHECK_OK(ts__dev_copy(b->d, h, b->p, b->bytes, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(b->d));
  return h;
}
static void dfree(dbuf *b) { ts__dev_free(b->d, b->p); }

static int bad; /* mismatches of the current case (reported once) */
static void expect(const char *what, ts_dtype dt, size_t n, const void *got, size_t i, double want, double tol) {
  double g = get(dt, got, i);
  if (!(g == want || (tol > 0 && g - want <= tol * (1 + (want < 0 ? -want : want)) &&
                      want - g <= tol * (1 + (want < 0 ? -want : want))))) {
    if (bad++ < 3)
      fprintf(stderr, "rank %d: %s %s n=%zu: element %zu is %g, want %g\n", R, what, ts_dtype_name(dt), n, i, g, want);
  }
}
static void done(const char *what, ts_dtype dt, size_t n) {
  CHECK_MSG(!bad, "%s %s n=%zu: %d elements differ", what, ts_dtype_name(dt), n, bad);
  bad = 0;
}

static double round_to(ts_dtype dt, double v) {
  unsigned char b[8];
  put(dt, b, 0, v);
  return get(dt, b, 0);
}

/* every collective of x on device d, dtype dt, n elements (each rank's block) */
static void run_all(ts__dcoll *x, ts__dev *d, ts_dtype dt, size_t n) {
  size_t es = ts_dtype_size(dt), nb = n * es;
  char *h = malloc(nb * (size_t)P + 16);
  /* all-reduce: sum out of place, max in place, mean (floats) out of place */
  for (int k = 0; k < 3; k++) {
    ts_reduce_op op = k == 0 ? TS_REDUCE_SUM : k == 1 ? TS_REDUCE_MAX : TS_REDUCE_MEAN;
    if (op == TS_REDUCE_MEAN && (dt == TS_I32 || dt == TS_I64)) continue;
    for (size_t i = 0; i < n; i++) put(dt, h, i, val(R, i));
    dbuf a = dnew(d, nb), b = dnew(d, nb);
    dput(&a, h);
    CHECK_OK(ts__dcoll_allreduce(x, a.p, k == 1 ? a.p : b.p, n, dt, op, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(k == 1 ? &a : &b);
    for (size_t i = 0; i < n; i++) {
      double s = 0, m = -1e9;
      for (int r = 0; r < P; r++) s += val(r, i), m = val(r, i) > m ? val(r, i) : m;
      double want = op == TS_REDUCE_SUM ? s : op == TS_REDUCE_MAX ? m : round_to(dt, s / P);
      expect("all-reduce", dt, n, got, i, want, op == TS_REDUCE_MEAN ? (dt == TS_BF16 ? 8e-3 : 1e-6) : 0);
    }
    done(op == TS_REDUCE_SUM ? "all-reduce sum" : op == TS_REDUCE_MAX ? "all-reduce max in place" : "all-reduce mean",
         dt, n);
    free(got);
    dfree(&a), dfree(&b);
  }
  /* all-gather: out of place, then in place (the rank's block already in recv) */
  for (int inplace = 0; inplace < 2; inplace++) {
    dbuf a = dnew(d, nb), all = dnew(d, nb * (size_t)P);
    for (size_t i = 0; i < n; i++) put(dt, h, i, val(R, i));
    if (inplace) {
      CHECK_OK(ts__dev_copy(d, (char *)all.p + (size_t)R * nb, h, nb, TS__H2D, NULL));
      CHECK_OK(ts__dev_sync(d));
    } else {
      dput(&a, h);
    }
    CHECK_OK(ts__dcoll_allgather(x, inplace ? (char *)all.p + (size_t)R * nb : a.p, all.p, n, dt, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(&all);
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < n; i++) expect("all-gather", dt, n, got, (size_t)r * n + i, val(r, i), 0);
    done(inplace ? "all-gather in place" : "all-gather", dt, n);
    free(got);
    dfree(&a), dfree(&all);
  }
  /* reduce-scatter (sum): rank r's block j holds val(r, j*n + i) */
  {
    dbuf a = dnew(d, nb * (size_t)P), b = dnew(d, nb);
    for (size_t i = 0; i < n * (size_t)P; i++) put(dt, h, i, val(R, i));
    dput(&a, h);
    CHECK_OK(ts__dcoll_reduce_scatter(x, a.p, b.p, n, dt, TS_REDUCE_SUM, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(&b);
    for (size_t i = 0; i < n; i++) {
      double s = 0;
      for (int r = 0; r < P; r++) s += val(r, (size_t)R * n + i);
      expect("reduce-scatter", dt, n, got, i, s, 0);
    }
    done("reduce-scatter", dt, n);
    free(got);
    dfree(&a), dfree(&b);
  }
  /* broadcast from the last rank */
  {
    dbuf a = dnew(d, nb);
    for (size_t i = 0; i < n; i++) put(dt, h, i, val(R, i));
    dput(&a, h);
    CHECK_OK(ts__dcoll_broadcast(x, a.p, n, dt, P - 1, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(&a);
    for (size_t i = 0; i < n; i++) expect("broadcast", dt, n, got, i, val(P - 1, i), 0);
    done("broadcast", dt, n);
    free(got);
    dfree(&a);
  }
  /* all-to-all: block j of rank r (val(r, j*n + i)) goes to rank j */
  {
    dbuf a = dnew(d, nb * (size_t)P), b = dnew(d, nb * (size_t)P);
    for (size_t i = 0; i < n * (size_t)P; i++) put(dt, h, i, val(R, i));
    dput(&a, h);
    CHECK_OK(ts__dcoll_alltoall(x, a.p, b.p, n, dt, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(&b);
    for (int r = 0; r < P; r++)
      for (size_t i = 0; i < n; i++) expect("all-to-all", dt, n, got, (size_t)r * n + i, val(r, (size_t)R * n + i), 0);
    done("all-to-all", dt, n);
    free(got);
    dfree(&a), dfree(&b);
  }
  /* send/receive between ranks 0 and 1: rank 0 sends n, rank 1 sends n/2 + 1 (both ways at once) */
  if (P >= 2 && R < 2) {
    size_t mine = R == 0 ? n : n / 2 + 1, theirs = R == 0 ? n / 2 + 1 : n;
    dbuf a = dnew(d, mine * es), b = dnew(d, theirs * es);
    for (size_t i = 0; i < mine; i++) put(dt, h, i, val(R, i));
    dput(&a, h);
    CHECK_OK(ts__dcoll_sendrecv(x, a.p, mine, b.p, theirs, dt, 1 - R, NULL));
    CHECK_OK(ts__dev_sync(d));
    void *got = dget(&b);
    for (size_t i = 0; i < theirs; i++) expect("send/receive", dt, n, got, i, val(1 - R, i), 0);
    done("send/receive", dt, n);
    free(got);
    dfree(&a), dfree(&b);
  }
  free(h);
}

/* A plan's collective nodes on the GPU (run_gpu_coll.c, through the slot's device collectives)
 * against the same plan on the CPU (run_coll.c, MPI): all-reduce, all-gather along dims 0 and 1,
 * reduce-scatter along dims 0 and 1, all-to-all (split 1, concat 2) and rank-slice along dim 1 of
 * a (2P, 4P, 3) f32 tensor of small integers: bitwise. `numbers` 0 (the sanitizers' stand-in runs
 * no kernel): the plumbing only. */
static void run_plan(ts__dcoll *x, ts__dev *d, int numbers) {
  ts_graph *g = NULL;
  CHECK_OK(ts_graph_create(&g));
  if (!g) return;
  ts_val in = ts_input(g, "x", TS_F32, ts_shape3(2 * P, 4 * P, 3));
  ts_val y[7] = {ts_allreduce(g, in, 0, P, TS_REDUCE_SUM), ts_allgather(g, in, 0, P, 0), ts_allgather(g, in, 0, P, 1),
                 ts_reduce_scatter(g, in, 0, P, 0, TS_REDUCE_SUM), ts_reduce_scatter(g, in, 0, P, 1, TS_REDUCE_MAX),
                 ts_alltoall(g, in, 0, P, 1, 2), ts_rank_slice(g, in, 0, P, 1)};
  const char *what[7] = {"all-reduce", "all-gather dim 0", "all-gather dim 1", "reduce-scatter dim 0",
                         "reduce-scatter dim 1 (max)", "all-to-all 1 -> 2", "rank-slice dim 1"};
  size_t n = (size_t)(2 * P * 4 * P * 3);
  float *hx = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) hx[i] = (float)val(R, i);
  ts_plan *pc = NULL, *pg = NULL;
  CHECK_OK(ts_plan_create(g, y, 7, &pc));
  CHECK_OK(ts_plan_create(g, y, 7, &pg));
  dbuf dx = dnew(d, n * sizeof(float));
  dput(&dx, hx);
  if (pc && pg) {
    CHECK_OK(ts_plan_set_comm(pc, 0, W));
    CHECK_OK(ts_plan_bind(pc, in, hx));
    CHECK_OK(ts_plan_run(pc, 0));
    CHECK_OK(ts_plan_set_device(pg, d));
    CHECK_OK(ts_plan_set_comm(pg, 0, W));
    CHECK_OK(ts_plan_bind(pg, in, dx.p));
    EXPECT_ERR(ts_plan_run(pg, 0), TS_EINVAL, "allreduce", "plan slot 0 has no device collectives");
    CHECK_OK(ts_plan_set_dcoll(pg, 0, x));
    CHECK_OK(ts_plan_run(pg, 0));
    for (int k = 0; k < 7; k++) {
      const ts_shape sh = ts_val_shape(g, y[k]);
      size_t m = (size_t)ts_shape_numel(&sh);
      float *got = malloc(m * sizeof(float));
      CHECK_OK(ts__dev_copy(d, got, ts_plan_data(pg, y[k]), m * sizeof(float), TS__D2H, NULL));
      CHECK_OK(ts__dev_sync(d));
      const float *want = ts_plan_data(pc, y[k]);
      if (numbers) CHECK_MSG(want && !memcmp(got, want, m * sizeof(float)), "plan on the GPU: %s differs from the CPU's", what[k]);
      free(got);
    }
  }
  dfree(&dx);
  ts_plan_free(pc), ts_plan_free(pg);
  ts_graph_free(g);
  free(hx);
}

static void run_matrix(ts__dcoll *x, ts__dev *d) {
  const size_t stages[] = {256, 4096};
  for (int k = 0; k < 2; k++) {
    CHECK_OK(ts__dcoll_set_stage_bytes(x, stages[k]));
    for (size_t t = 0; t < sizeof k_dt / sizeof k_dt[0]; t++)
      for (size_t s = 0; s < sizeof k_sizes / sizeof k_sizes[0]; s++) run_all(x, d, k_dt[t], k_sizes[s]);
  }
}

/* the backend chosen for `want` on device d; checks its description contains `says` */
static ts__dcoll *make(ts__dev *d, ts__dcoll_backend want, ts__dcoll_backend expect_b, const char *says) {
  ts__dcoll *x = NULL;
  CHECK_OK(ts__dcoll_create(W, d, want, &x));
  if (!x) return NULL;
  CHECK_MSG(ts__dcoll_backend_of(x) == expect_b, "want %s: got %s (%s)", ts__dcoll_backend_name(want),
            ts__dcoll_backend_name(ts__dcoll_backend_of(x)), ts__dcoll_describe(x));
  CHECK_MSG(strstr(ts__dcoll_describe(x), says), "'%s' does not say '%s'", ts__dcoll_describe(x), says);
  if (R == 0) printf("%s -> %s\n", ts__dcoll_backend_name(want), ts__dcoll_describe(x));
  return x;
}

/* 1 when the stand-in driver runs the kernels (not under the sanitizers) */
static int emulates(void) {
  void *fk = dlopen(getenv("TESSERA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  int *emu = fk ? (int *)dlsym(fk, "fake_cuda_emulates") : NULL;
  int v = emu && *emu;
  if (fk) dlclose(fk);
  return v;
}

static int nccl_calls(void) {
  const char *lib = getenv("TESSERA_LIBNCCL");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int *n = h ? (int *)dlsym(h, "fake_nccl_calls") : NULL;
  int v = n ? *n : -1;
  if (h) dlclose(h);
  return v;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&W));
  R = ts_comm_rank(W), P = ts_comm_size(W);
  char share[64];
  snprintf(share, sizeof share, "ranks 0 and 1 share GPU 0");
  ts__dev *d = NULL;

  if (!*mode) { /* the real driver and NCCL: rank r on GPU r mod count */
    int ng = 0;
    if (ts_device_count(TS_DEVICE_GPU, &ng) || ng < 1) {
      ts_test_skip("no GPU: %s", ts_last_error());
      ts_comm_free(W);
      return ts_test_finish_job("test_dcoll");
    }
    CHECK_OK(ts__dev_open(TS_DEVICE_GPU, R % ng, &d));
    ts__dcoll *x = NULL;
    CHECK_OK(ts__dcoll_create(W, d, TS__DCOLL_AUTO, &x));
    if (x && R == 0) printf("auto -> %s\n", ts__dcoll_describe(x));
    if (x) CHECK(ts__dcoll_backend_of(x) == (P <= ng && ts__nccl_available() ? TS__DCOLL_NCCL : TS__DCOLL_MPI));
    if (x) run_matrix(x, d);
    ts__dcoll_free(x);
    if (P > 1) {
      x = make(d, TS__DCOLL_MPI, TS__DCOLL_MPI, "MPI staged");
      if (x) run_matrix(x, d);
      ts__dcoll_free(x);
    }
    ts__dev_close(d);
    ts_comm_free(W);
    return ts_test_finish_job("test_dcoll");
  }

  if (!strcmp(mode, "fake-nonccl")) {
    setenv("FAKE_CUDA_COUNT", "8", 1);
    CHECK_OK(ts__dev_open(TS_DEVICE_GPU, R, &d));
    ts__dcoll *x = make(d, TS__DCOLL_AUTO, TS__DCOLL_MPI, "NCCL not found");
    if (x) run_all(x, d, TS_F32, 1000);
    ts__dcoll_free(x);
    x = NULL;
    EXPECT_ERR(ts__dcoll_create(W, d, TS__DCOLL_NCCL, &x), TS_ECONFIG, "parallel.comm_backend nccl: rank 0",
               P > 1 ? "" : "NCCL not found");
    ts__dev_close(d);
    ts_comm_free(W);
    return ts_test_finish_job("test_dcoll fake-nonccl");
  }

  /* 1. every rank on GPU 0 */
  setenv("FAKE_CUDA_COUNT", "1", 1);
  CHECK_OK(ts__dev_open(TS_DEVICE_GPU, 0, &d));
  ts__dcoll *x = make(d, TS__DCOLL_AUTO, P > 1 ? TS__DCOLL_MPI : TS__DCOLL_NCCL, P > 1 ? share : "NCCL");
  if (x) run_matrix(x, d), run_plan(x, d, emulates());
  ts__dcoll_free(x);
  if (P > 1) {
    x = NULL;
    EXPECT_ERR(ts__dcoll_create(W, d, TS__DCOLL_NCCL, &x), TS_ECONFIG, "parallel.comm_backend nccl: ", share,
               "one GPU per rank");
    CHECK(!x);
  }
  ts__dev_close(d);

  /* 2. a GPU per rank */
  char cnt[16];
  snprintf(cnt, sizeof cnt, "%d", P);
  setenv("FAKE_CUDA_COUNT", cnt, 1);
  CHECK_OK(ts__dev_open(TS_DEVICE_GPU, R, &d));
  int before = nccl_calls();
  x = make(d, TS__DCOLL_AUTO, TS__DCOLL_NCCL, "NCCL 2.");
  if (x) run_matrix(x, d), run_plan(x, d, emulates());
  ts__dcoll_free(x);
  int after = nccl_calls();
  CHECK_MSG(before >= 0 && after > before + 100, "the stand-in NCCL counted %d calls, then %d", before, after);
  /* the watchdog of NCCL's queued work: a stream that never finishes (the stand-in's events stay
   * pending) ends the wait after its timeout, NCCL aborted, every later call refused */
  x = make(d, TS__DCOLL_AUTO, TS__DCOLL_NCCL, "NCCL 2.");
  if (x) {
    CHECK_OK(ts__dcoll_wait(x, NULL, 0.3, "all-reduce"));
    setenv("FAKE_CUDA_EVENT_PENDING", "1", 1);
    double t0 = ts_time_now();
    EXPECT_ERR(ts__dcoll_wait(x, NULL, 0.3, "all-reduce"), TS_ECOMM, "device all-reduce over", "(NCCL): not finished after 0.3 s");
    double dt = ts_time_now() - t0;
    CHECK_MSG(dt >= 0.3 && dt < 5, "the wait took %.2f s", dt);
    unsetenv("FAKE_CUDA_EVENT_PENDING");
    float one = 1;
    EXPECT_ERR(ts__dcoll_allreduce(x, &one, &one, 1, TS_F32, TS_REDUCE_SUM, NULL), TS_ECOMM, "failed earlier");
    EXPECT_ERR(ts__dcoll_wait(x, NULL, 0.3, "all-gather"), TS_ECOMM, "device all-gather: the communicator failed earlier");
    ts__dcoll_free(x);
  }
  /* a plan's collectives under the same watchdog: its run ends within parallel.comm_timeout
   * (the synchronisation at its end would wait on a stalled peer for ever) */
  x = make(d, TS__DCOLL_AUTO, TS__DCOLL_NCCL, "NCCL 2.");
  if (x) {
    ts_graph *g = NULL;
    ts_plan *pg = NULL;
    CHECK_OK(ts_graph_create(&g));
    ts_val in = ts_input(g, "x", TS_F32, ts_shape1(8)), y = ts_allreduce(g, in, 0, P, TS_REDUCE_SUM);
    CHECK_OK(ts_plan_create(g, &y, 1, &pg));
    dbuf dx = dnew(d, 8 * sizeof(float));
    double old = ts_comm_get_timeout();
    if (pg) {
      CHECK_OK(ts_plan_set_device(pg, d));
      CHECK_OK(ts_plan_set_comm(pg, 0, W));
      CHECK_OK(ts_plan_set_dcoll(pg, 0, x));
      CHECK_OK(ts_plan_bind(pg, in, dx.p));
      CHECK_OK(ts_plan_run(pg, 0));
      ts_comm_set_timeout(0.3);
      setenv("FAKE_CUDA_EVENT_PENDING", "1", 1);
      double t0 = ts_time_now();
      EXPECT_ERR(ts_plan_run(pg, 1), TS_ECOMM, "device collective of the plan over", "not finished after 0.3 s");
      double dt = ts_time_now() - t0;
      CHECK_MSG(dt >= 0.3 && dt < 5, "the plan's run took %.2f s to give up", dt);
      unsetenv("FAKE_CUDA_EVENT_PENDING");
      ts_comm_set_timeout(old);
    }
    dfree(&dx);
    ts_plan_free(pg);
    ts_graph_free(g);
    ts__dcoll_free(x);
  }
  after = nccl_calls(); /* (the NCCL calls so far: none from comm_backend mpi below) */
  x = make(d, TS__DCOLL_MPI, TS__DCOLL_MPI, "parallel.comm_backend mpi");
  if (x) run_matrix(x, d);
  ts__dcoll_free(x);
  CHECK_MSG(nccl_calls() == after, "comm_backend mpi called NCCL");
  /* NCCL does not start: auto stages, saying so; nccl is refused */
  setenv("FAKE_NCCL_INIT_FAIL", "2", 1);
  x = make(d, TS__DCOLL_AUTO, TS__DCOLL_MPI, "ncclCommInitRank");
  if (x) run_all(x, d, TS_BF16, 1000);
  ts__dcoll_free(x);
  x = NULL;
  EXPECT_ERR(ts__dcoll_create(W, d, TS__DCOLL_NCCL, &x), TS_ECONFIG, "parallel.comm_backend nccl", "ncclCommInitRank");
  unsetenv("FAKE_NCCL_INIT_FAIL");
  ts__dev_close(d);

  /* 3. the CPU */
  CHECK_OK(ts__dev_open(TS_DEVICE_CPU, 0, &d));
  x = make(d, TS__DCOLL_AUTO, TS__DCOLL_MPI, "CPU buffers");
  if (x) run_all(x, d, TS_F32, 4099), run_all(x, d, TS_I64, 7);
  ts__dcoll_free(x);
  x = NULL;
  EXPECT_ERR(ts__dcoll_create(W, d, TS__DCOLL_NCCL, &x), TS_ECONFIG, "rank 0 runs on the CPU");
  ts__dev_close(d);
  ts_comm_free(W);
  return ts_test_finish_job("test_dcoll fake");
}
