/* Topology (src/comm/topo.c): hosts learned by MPI_Comm_split_type(SHARED), the node and leaders'
 * communicators, the hierarchical all-reduce against the exact sum and against the flat one, its
 * non-blocking form (several in flight) against the exact sums and the blocking one, their
 * refusals; the cost model's flat and hierarchical all-reduce times (planner). Runs as one process,
 * under mpirun -n 2 and 4 on this host (one host), and on the test cluster of 2 hosts x 2 ranks
 * (tests/cluster/topo_test.sh) with TS_TOPO_EXPECT set to the description it must print. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>

#include "test_util.h"
#include "tessera/comm.h"
#include "planner/planner.h"

static void test_cost(void) {
  ts_cluster c;
  memset(&c, 0, sizeof c);
  c.devices_per_node = 2;
  c.nodes = 2;
  c.intra_bw = 1e10;
  c.intra_latency = 1e-6;
  c.inter_bw = 1e8;
  c.inter_latency = 1e-5;
  double b = 64.0 * 1024 * 1024;
  /* one host: the flat ring inside */
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 1, 4, b) - ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 4, 0, b)) < 1e-12);
  /* 2 x 2, libnbc's binomial tree: the reduce's round inside each host and its round between the
   * hosts (one stream), the broadcast's round inside and its round between the hosts (both ranks
   * of host 0 send: 2 streams on the link) */
  double link = 2e8, in = 1e-6 + b / 1e10, f = 2 * in + 2 * 1e-5 + 3 * b / link;
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 2, 2, b) - f) < 1e-9 * f);
  /* hierarchical: binomial inside (2 rounds), between the leaders (2 rounds), broadcast (1) */
  double h = 2 * in + 2 * (1e-5 + b / link) + in;
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 2, 2, b) - h) < 1e-9 * h);
  /* 4 hosts x 4: log2 rounds, the broadcast's rounds between hosts with 4 streams */
  double link4 = 4e8, in4 = 1e-6 + b / 1e10;
  f = 4 * in4 + 2 * (2 * 1e-5 + 5 * b / link4);
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 4, 4, b) - f) < 1e-9 * f);
  h = 4 * in4 + 4 * (1e-5 + b / link4) + 2 * in4;
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 4, 4, b) - h) < 1e-9 * h);
  /* a measured broadcast inside replaces intra_* in the broadcast's rounds */
  c.intra_bcast_latency = 3e-6;
  c.intra_bcast_bw = 2e10;
  h = 2 * in + 2 * (1e-5 + b / link) + 3e-6 + b / 2e10;
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 2, 2, b) - h) < 1e-9 * h);
  /* the measured flat line: used on the calibrated layout only */
  c.flat_allreduce_latency = 1e-3;
  c.flat_allreduce_bw = 5e7;
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 2, 2, b) - (1e-3 + b / 5e7)) < 1e-12);
  f = 4 * in4 + 2 * (2 * 1e-5 + 5 * b / link4);
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 4, 4, b) - f) < 1e-9 * f);
  /* the choice follows the prices: the measured flat line slower than hierarchical, then faster */
  CHECK(ts_cluster_allreduce_hier(&c, 2, 2, b) < ts_cluster_allreduce_flat(&c, 2, 2, b));
  c.flat_allreduce_bw = 1e9;
  CHECK(ts_cluster_allreduce_flat(&c, 2, 2, b) < ts_cluster_allreduce_hier(&c, 2, 2, b));
  /* the hierarchical one measured whole as the buckets run it (chained): its line, on the
   * calibrated layout only, and the choice follows it */
  c.hier_allreduce_latency = 3e-4;
  c.hier_allreduce_bw = 2e9;
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 2, 2, b) - (3e-4 + b / 2e9)) < 1e-12);
  CHECK(ts_cluster_allreduce_hier(&c, 2, 2, b) < ts_cluster_allreduce_flat(&c, 2, 2, b));
  h = 4 * in4 + 4 * (1e-5 + b / link4) + 2 * (3e-6 + b / 2e10); /* another layout: the parts' formula */
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 4, 4, b) - h) < 1e-9 * h);
  c.flat_allreduce_latency = c.flat_allreduce_bw = c.intra_bcast_latency = c.intra_bcast_bw = 0;
  c.hier_allreduce_latency = c.hier_allreduce_bw = 0;
  /* links between hosts as fast as inside: flat wins; 8 ranks a host behind a slow link: hierarchical */
  c.inter_bw = c.intra_bw;
  c.inter_latency = c.intra_latency;
  CHECK(ts_cluster_allreduce_flat(&c, 2, 2, b) < ts_cluster_allreduce_hier(&c, 2, 2, b));
  c.inter_bw = 1e7;
  c.inter_latency = 1e-3;
  CHECK(ts_cluster_allreduce_hier(&c, 2, 8, 1024) < ts_cluster_allreduce_flat(&c, 2, 8, 1024));
}

/* ts_cluster_fit_alpha_beta: exact on a line; a line through the origin when the intercept would be
 * negative; refusals */
static void test_fit(void) {
  double x[4] = {1 << 20, 4 << 20, 16 << 20, 64 << 20}, y[4], a = 0, k = 0;
  for (int i = 0; i < 4; i++) y[i] = 2.5e-4 + x[i] / 1.19e8;
  CHECK_OK(ts_cluster_fit_alpha_beta(x, y, 4, &a, &k));
  CHECK(fabs(a - 2.5e-4) < 1e-12 && fabs(k * 1.19e8 - 1) < 1e-12);
  for (int i = 0; i < 4; i++) y[i] = x[i] / 2e9; /* no latency */
  CHECK_OK(ts_cluster_fit_alpha_beta(x, y, 2, &a, &k));
  CHECK(fabs(a) < 1e-15 && fabs(k * 2e9 - 1) < 1e-12);
  y[0] = 1e-4; y[1] = 2e-2; y[2] = 8e-2; y[3] = 3.2e-1; /* the line would cross below 0 */
  CHECK_OK(ts_cluster_fit_alpha_beta(x, y, 4, &a, &k));
  CHECK(a == 0 && k > 0);
  CHECK(ts_cluster_fit_alpha_beta(x, y, 1, &a, &k) == TS_EINVAL);
  y[2] = 0;
  CHECK(ts_cluster_fit_alpha_beta(x, y, 4, &a, &k) == TS_EINVAL);
  double flat[2] = {1e-2, 1e-2};
  CHECK(ts_cluster_fit_alpha_beta(x, flat, 2, &a, &k) == TS_EINVAL); /* no growth with the size */
}

/* The non-blocking hierarchical all-reduce: six requests of very different sizes in flight at
 * once (so their steps complete in different orders on different ranks), SUM and MEAN, tested
 * in a rank-dependent order with rank-dependent pauses, the last waited for first (its wait must
 * drive the older ones): integer values (exact in f32, any order) against the closed form, and
 * random floats bitwise against the blocking call on the same data where each step sums at most
 * two ranks (exact in any order), else within rounding of the order. Then the refusals. */
static void test_nonblocking(ts_comm_topo *t, int R, int N) {
  enum { K = 6 };
  const size_t len[K] = {1, 3000001, 17, 250000, 65536, 999};
  float *v[K], *ref[K];
  ts_comm_hier_req *q[K];
  for (int k = 0; k < K; k++) {
    v[k] = malloc(len[k] * sizeof(float));
    ref[k] = malloc(len[k] * sizeof(float));
    CHECK(v[k] && ref[k]);
  }
  for (int pass = 0; pass < 2; pass++) { /* 0: integers, SUM and MEAN; 1: random floats */
    uint64_t s = 777 + 31 * (uint64_t)R;
    for (int k = 0; k < K; k++)
      for (size_t i = 0; i < len[k]; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        v[k][i] = pass ? (float)((double)(s >> 40) / (double)(1ULL << 24) - 0.5) : (float)(R * 1000 + k + (int)(i % 89));
        ref[k][i] = v[k][i];
      }
    for (int k = 0; k < K; k++)
      CHECK_OK(ts_comm_iallreduce_hier(t, v[k], len[k], TS_F32, k % 2 ? TS_REDUCE_MEAN : TS_REDUCE_SUM, &q[k]));
    CHECK_OK(ts_comm_hier_wait(q[K - 1]));
    int left = K - 1, spins = 0;
    while (left > 0 && spins < 10000000) {
      for (int j = 0; j < K - 1; j++) {
        int k = (j + R) % (K - 1), done = 0;
        if (!q[k]) continue;
        CHECK_OK(ts_comm_hier_test(q[k], &done));
        if (done) {
          ts_comm_hier_req_free(q[k]);
          q[k] = NULL;
          left--;
        }
        if (R % 2) usleep(50);
      }
      spins++;
    }
    CHECK_MSG(left == 0, "%d requests still in flight", left);
    ts_comm_hier_req_free(q[K - 1]);
    int bad = 0;
    double worst = 0;
    int exact = ts_comm_topo_local_size(t) <= 2 && ts_comm_topo_num_hosts(t) <= 2;
    for (int k = 0; k < K; k++) {
      if (!pass) {
        for (size_t i = 0; i < len[k]; i++) {
          double sum = 1000.0 * N * (N - 1) / 2 + (double)N * (k + (int)(i % 89));
          bad += v[k][i] != (float)(k % 2 ? sum / N : sum);
        }
        continue;
      }
      CHECK_OK(ts_comm_allreduce_hier(t, ref[k], len[k], TS_F32, k % 2 ? TS_REDUCE_MEAN : TS_REDUCE_SUM));
      for (size_t i = 0; i < len[k]; i++) {
        double d = fabs((double)v[k][i] - ref[k][i]);
        worst = d > worst ? d : worst;
      }
    }
    CHECK_MSG(bad == 0, "non-blocking hierarchical: %d sums wrong", bad);
    CHECK_MSG(exact ? worst == 0 : worst <= 1e-5, "non-blocking vs blocking hierarchical: %g", worst);
  }
  float x[4] = {0};
  ts_comm_hier_req *r = NULL;
  CHECK(ts_comm_iallreduce_hier(t, x, 4, TS_F16, TS_REDUCE_SUM, &r) == TS_EDTYPE && !r);
  CHECK(ts_comm_iallreduce_hier(t, x, 4, TS_F32, TS_REDUCE_MIN, &r) == TS_EDTYPE && !r);
  CHECK(ts_comm_iallreduce_hier(NULL, x, 4, TS_F32, TS_REDUCE_SUM, &r) == TS_EINVAL && !r);
  CHECK(ts_comm_hier_wait(NULL) == TS_EINVAL);
  for (int k = 0; k < K; k++) {
    free(v[k]);
    free(ref[k]);
  }
}

int main(int argc, char **argv) {
  test_cost();
  test_fit();
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w = NULL;
  CHECK_OK(ts_comm_world(&w));
  int R = ts_comm_rank(w), N = ts_comm_size(w);
  ts_comm_topo *t = NULL;
  CHECK_OK(ts_comm_topo_create(w, &t));
  if (!t) return ts_test_finish_job("test_topo");
  int H = ts_comm_topo_num_hosts(t);
  CHECK(H >= 1 && H <= N);
  /* hosts numbered by their lowest rank: host ids never skip, rank 0 on host 0 */
  int maxh = -1, local = 0;
  for (int r = 0; r < N; r++) {
    int h = ts_comm_topo_host(t, r);
    CHECK(h >= 0 && h <= maxh + 1);
    if (h > maxh) maxh = h;
    if (h == ts_comm_topo_host(t, R)) local++;
  }
  CHECK(maxh == H - 1 && ts_comm_topo_host(t, 0) == 0 && ts_comm_topo_host(t, N) == -1);
  CHECK(ts_comm_topo_local_size(t) == local && ts_comm_size(ts_comm_topo_node(t)) == local);
  ts_comm *lead = ts_comm_topo_leaders(t);
  int first = 1;
  for (int r = 0; r < R; r++) first &= ts_comm_topo_host(t, r) != ts_comm_topo_host(t, R);
  CHECK((lead != NULL) == first);
  if (lead) CHECK(ts_comm_size(lead) == H);
  char me[MPI_MAX_PROCESSOR_NAME + 1] = "";
  int len = 0;
  MPI_Get_processor_name(me, &len);
  CHECK_MSG(!strncmp(ts_comm_topo_host_name(t, ts_comm_topo_host(t, R)), me, 63), "host name %s, this process %s",
            ts_comm_topo_host_name(t, ts_comm_topo_host(t, R)), me);
  char desc[512];
  ts_comm_topo_describe(t, desc, sizeof desc);
  const char *want = getenv("TS_TOPO_EXPECT");
  if (want && *want) CHECK_MSG(!strcmp(desc, want), "described as '%s', expected '%s'", desc, want);
  else if (H == 1) {
    char one[600];
    if (N > 1) snprintf(one, sizeof one, "1 host: %s (ranks 0-%d)", me, N - 1);
    else snprintf(one, sizeof one, "1 host: %s (ranks 0)", me);
    CHECK_MSG(!strcmp(desc, one), "described as '%s', expected '%s'", desc, one);
  }
  /* the hierarchical all-reduce: integers (exact in f32) against the closed form, SUM and MEAN */
  size_t n = 100003;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  for (size_t i = 0; i < n; i++) a[i] = (float)(R * 1000 + (int)(i % 97));
  CHECK_OK(ts_comm_allreduce_hier(t, a, n, TS_F32, TS_REDUCE_SUM));
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != (float)(1000.0 * N * (N - 1) / 2 + (double)N * (int)(i % 97));
  CHECK_MSG(bad == 0, "%d of %zu sums wrong", bad, n);
  for (size_t i = 0; i < n; i++) a[i] = (float)(R * 8 + 4);
  CHECK_OK(ts_comm_allreduce_hier(t, a, n, TS_F32, TS_REDUCE_MEAN));
  CHECK(a[0] == (float)(4 * N) && a[n - 1] == (float)(4 * N)); /* mean of 8R + 4 over R < N */
  /* random floats: equal to the flat all-reduce within rounding of the order */
  uint64_t s = 12345 + (uint64_t)R;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    a[i] = b[i] = (float)((double)(s >> 40) / (double)(1ULL << 24) - 0.5);
  }
  CHECK_OK(ts_comm_allreduce_hier(t, a, n, TS_F32, TS_REDUCE_SUM));
  CHECK_OK(ts_comm_allreduce(w, b, b, n, TS_F32, TS_REDUCE_SUM));
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > worst) worst = d;
  }
  CHECK_MSG(worst <= 1e-5, "hierarchical vs flat: %g", worst);
  test_nonblocking(t, R, N);
  /* refusals */
  CHECK(ts_comm_allreduce_hier(t, a, 4, TS_BF16, TS_REDUCE_SUM) == TS_EDTYPE);
  CHECK(ts_comm_allreduce_hier(t, a, 4, TS_F32, TS_REDUCE_MAX) == TS_EDTYPE);
  CHECK(ts_comm_allreduce_hier(NULL, a, 4, TS_F32, TS_REDUCE_SUM) == TS_EINVAL);
  free(a);
  free(b);
  ts_comm_topo_free(t);
  return ts_test_finish_job("test_topo");
}
