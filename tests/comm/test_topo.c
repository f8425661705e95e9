/* Topology (src/comm/topo.c): hosts learned by MPI_Comm_split_type(SHARED), the node and leaders'
 * communicators, the hierarchical all-reduce against the exact sum and against the flat one, its
 * refusals; the cost model's flat and hierarchical all-reduce times (planner). Runs as one process,
 * under mpirun -n 2 and 4 on this host (one host), and on the test cluster of 2 hosts x 2 ranks
 * (tests/cluster/topo_test.sh) with TS_TOPO_EXPECT set to the description it must print. */
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "test_util.h"
#include "tessera/comm.h"
#include "tessera/planner.h"

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
  /* 2 x 2: 2(N-1)/N b / (inter_bw L) + 2(N-1) alpha */
  double link = 2e8, f = 2 * 3.0 / 4 * b / link + 6 * 1e-5;
  CHECK(fabs(ts_cluster_allreduce_flat(&c, 2, 2, b) - f) < 1e-9 * f);
  double h = (2 * 0.5 * b / 1e10 + 2 * 1e-6) + (b / 1e10 + 1e-6) + (2 * 0.5 * b / link + 2 * 1e-5);
  CHECK(fabs(ts_cluster_allreduce_hier(&c, 2, 2, b) - h) < 1e-9 * h);
  /* links between hosts as fast as inside: flat wins; 8 ranks a host behind a slow link: hierarchical */
  c.inter_bw = c.intra_bw;
  c.inter_latency = c.intra_latency;
  CHECK(ts_cluster_allreduce_flat(&c, 2, 2, b) < ts_cluster_allreduce_hier(&c, 2, 2, b));
  c.inter_bw = 1e7;
  c.inter_latency = 1e-3;
  CHECK(ts_cluster_allreduce_hier(&c, 2, 8, 1024) < ts_cluster_allreduce_flat(&c, 2, 8, 1024));
}

int main(int argc, char **argv) {
  test_cost();
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
  /* refusals */
  CHECK(ts_comm_allreduce_hier(t, a, 4, TS_BF16, TS_REDUCE_SUM) == TS_EDTYPE);
  CHECK(ts_comm_allreduce_hier(t, a, 4, TS_F32, TS_REDUCE_MAX) == TS_EDTYPE);
  CHECK(ts_comm_allreduce_hier(NULL, a, 4, TS_F32, TS_REDUCE_SUM) == TS_EINVAL);
  free(a);
  free(b);
  ts_comm_topo_free(t);
  return ts_test_finish_job("test_topo");
}
