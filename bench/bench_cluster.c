/* bench_cluster: all-reduce across hosts, measured against the alpha-beta prediction of a cluster
 * description: flat in place, hierarchical, and flat from a separate send buffer (docs/cluster.md). Run under mpirun on several hosts
 * (bench/cluster_bench.sh builds a test cluster of network namespaces and runs it):
 *
 *   mpirun -n 4 --hostfile H build/bench_cluster --cluster local.yaml [--reps R] [--mib 1,8,64]
 *
 * For each size: R repeats of flat (ts_comm_iallreduce in place over every rank, waited for, as the
 * gradient buckets issue it), hierarchical (inside each host, between hosts, broadcast inside) and
 * flat from a separate send buffer (the copy included), the order rotating each repeat, each timed
 * from a barrier to the slowest rank's end; medians. Prints per size the measured and predicted
 * times (ts_cluster_allreduce_flat / _hier / _flat_send on the description), their ratio, which
 * is fastest measured and which the cost model chooses (the reducer's rule: hierarchical against
 * the better flat one, then per bucket in place or from a send buffer). Rank 0 prints; JSON
 * lines then a table. Where the description has optimizer sharding's measured lines (tessera
 * calibrate across the hosts), a second table: MPI's and the ring's reduce-scatter and all-gather
 * per size against them, and parallel.reduce_scatter auto's choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/comm.h"
#include "planner/planner.h"
#include "tessera/tessera.h"

static void die(const char *what) {
  fprintf(stderr, "bench_cluster: %s: %s\n", what, ts_last_error());
  exit(1);
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* one timed all-reduce of n floats: flat or hierarchical; seconds of the slowest rank, each from
 * its barrier. Hierarchical: part[0..2] = the all-reduce inside the hosts, the leaders' one, the
 * broadcast inside (each the slowest rank's end less the previous one's). */
static double timed(ts_comm *w, ts_comm_topo *t, float *buf, float *snd, size_t n, int hier, double part[3]) {
  if (ts_comm_barrier(w)) die("barrier");
  double e[4];
  e[0] = ts_time_now();
  int rc = 0;
  if (hier) {
    rc = ts_comm_allreduce(ts_comm_topo_node(t), buf, buf, n, TS_F32, TS_REDUCE_SUM);
    e[1] = ts_time_now();
    if (!rc && ts_comm_topo_leaders(t)) rc = ts_comm_allreduce(ts_comm_topo_leaders(t), buf, buf, n, TS_F32, TS_REDUCE_SUM);
    e[2] = ts_time_now();
    if (!rc) rc = ts_comm_broadcast(ts_comm_topo_node(t), buf, n, TS_F32, 0);
  } else { /* flat, non-blocking as the buckets issue it: in place, or from the send buffer snd */
    ts_comm_req *q = NULL;
    if (snd) memcpy(snd, buf, n * sizeof(float));
    rc = ts_comm_iallreduce(w, snd ? snd : buf, buf, n, TS_F32, TS_REDUCE_SUM, &q);
    if (!rc) rc = ts_comm_wait(q);
    ts_comm_req_free(q);
    e[1] = e[2] = ts_time_now();
  }
  e[3] = ts_time_now();
  if (rc) die(hier ? "hierarchical all-reduce" : "all-reduce");
  float m[3] = {(float)(e[1] - e[0]), (float)(e[2] - e[0]), (float)(e[3] - e[0])};
  if (ts_comm_allreduce(w, m, m, 3, TS_F32, TS_REDUCE_MAX)) die("max");
  if (part) {
    part[0] = m[0];
    part[1] = m[1] - m[0];
    part[2] = m[2] - m[1];
  }
  return m[2];
}

/* One timed collective of optimizer sharding on n floats (equal parts, in place), as the buckets
 * issue it: kind 0 the reduce-scatter, 1 the all-gather; ring 0 MPI's, 1 the ring's; the slowest
 * rank's seconds from a barrier. */
static double timed_zero(ts_comm *w, ts_comm *rw, float *buf, size_t n, int kind, int ring) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t counts[256], at = 0;
  if (N > 256) die("more than 256 ranks");
  ts_comm_block_counts(n, N, counts);
  for (int r = 0; r < R; r++) at += counts[r];
  if (ts_comm_barrier(w)) die("barrier");
  double t0 = ts_time_now();
  int rc;
  if (ring) {
    ts_comm_ring_req *q = NULL;
    rc = kind ? ts_comm_iallgatherv_ring(rw, buf + at, buf, counts, NULL, TS_F32, 0, &q)
              : ts_comm_ireduce_scatter_ring(rw, buf, buf + at, counts, TS_F32, TS_REDUCE_SUM, 0, &q);
    if (!rc) rc = ts_comm_ring_wait(q);
    ts_comm_ring_req_free(q);
  } else {
    ts_comm_req *q = NULL;
    rc = kind ? ts_comm_iallgatherv(w, buf + at, buf, counts, NULL, TS_F32, &q)
              : ts_comm_ireduce_scatter(w, buf, buf + at, counts, TS_F32, TS_REDUCE_SUM, &q);
    if (!rc) rc = ts_comm_wait(q);
    ts_comm_req_free(q);
  }
  if (rc) die(kind ? "all-gather" : "reduce-scatter");
  float dt = (float)(ts_time_now() - t0);
  if (ts_comm_allreduce(w, &dt, &dt, 1, TS_F32, TS_REDUCE_MAX)) die("max");
  return dt;
}

/* Optimizer sharding's collectives per size (issue 32): MPI's and the ring's reduce-scatter and
 * all-gather measured (the four rotating each repeat, medians) against the description's measured
 * lines (ts_cluster_reduce_scatter_measured / ts_cluster_allgather_measured, what the planner
 * prices), and parallel.reduce_scatter auto's choice (the reduce-scatter the lines price faster)
 * against the one measured faster. Returns the failed checks (rank 0). */
static int zero_table(ts_comm *w, const ts_cluster *c, int H, int L, const char *mib, int reps) {
  int me = ts_comm_rank(w), fails = 0;
  ts_comm *rw = NULL;
  if (ts_comm_dup(w, &rw)) die("the rings' communicator");
  if (!me)
    printf("# optimizer sharding's collectives, measured ms (predicted from %s's lines, ratio); auto's reduce-scatter\n"
           "%6s %22s %22s %22s %22s %7s %7s %6s\n", c->name, "MiB", "reduce-scatter MPI's", "reduce-scatter ring",
           "all-gather MPI's", "all-gather ring", "fastest", "model", "choice");
  for (const char *p = mib; *p;) {
    double m = strtod(p, (char **)&p);
    if (*p == ',') p++;
    if (m <= 0) break;
    size_t n = (size_t)(m * 1024 * 1024 / sizeof(float));
    float *buf = calloc(n, sizeof(float));
    double *t = malloc(sizeof(double) * (size_t)reps * 4), med[4], pred[4], bytes = (double)n * sizeof(float);
    if (!buf || !t) die("memory");
    for (int v = 0; v < 4; v++) timed_zero(w, rw, buf, n, v / 2, v % 2); /* warm-up */
    for (int r = 0; r < reps; r++)
      for (int j = 0; j < 4; j++) {
        int v = (r + j) % 4;
        t[v * reps + r] = timed_zero(w, rw, buf, n, v / 2, v % 2);
      }
    for (int v = 0; v < 4; v++) {
      med[v] = median(t + v * reps, reps);
      pred[v] = v / 2 ? ts_cluster_allgather_measured(c, H, L, bytes, v % 2)
                      : ts_cluster_reduce_scatter_measured(c, H, L, bytes, v % 2);
    }
    if (!me) {
      printf("%6g", m);
      for (int v = 0; v < 4; v++) {
        double q = pred[v] < 1e300 ? med[v] / pred[v] : 0;
        int ok = q >= 1 / 1.2 && q <= 1.2;
        fails += !ok;
        printf(" %8.2f (%7.2f, %4.2f)%s", med[v] * 1e3, pred[v] < 1e300 ? pred[v] * 1e3 : 0.0, q, ok ? " " : "!");
      }
      int fast = med[1] < med[0], model = !(pred[0] < 1e300 && pred[1] < 1e300 && pred[1] >= pred[0]);
      fails += fast != model;
      printf(" %7s %7s %6s\n", fast ? "ring" : "mpi", model ? "ring" : "mpi", fast == model ? "PASS" : "FAIL");
      printf("{\"name\":\"cluster_zero\",\"mib\":%g,\"rs_mpi_ms\":%.3f,\"rs_mpi_pred_ms\":%.3f,\"rs_ring_ms\":%.3f,"
             "\"rs_ring_pred_ms\":%.3f,\"ag_mpi_ms\":%.3f,\"ag_mpi_pred_ms\":%.3f,\"ag_ring_ms\":%.3f,\"ag_ring_pred_ms\":%.3f}\n",
             m, med[0] * 1e3, pred[0] * 1e3, med[1] * 1e3, pred[1] * 1e3, med[2] * 1e3, pred[2] * 1e3, med[3] * 1e3,
             pred[3] * 1e3);
    }
    free(t);
    free(buf);
  }
  if (!me)
    printf("# within 20%% (! marks a miss); choice: auto's reduce-scatter the one measured faster; %d check%s failed\n",
           fails, fails == 1 ? "" : "s");
  ts_comm_free(rw);
  return fails;
}

int main(int argc, char **argv) {
  const char *cluster = "local", *mib = "1,8,64";
  int reps = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cluster") && i + 1 < argc) cluster = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = argv[++i];
    else {
      fprintf(stderr, "usage: bench_cluster [--cluster FILE|NAME] [--reps R] [--mib 1,8,64]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 100) reps = 5;
  if (ts_comm_init(&argc, &argv)) die("init");
  ts_comm *w = NULL;
  ts_comm_topo *t = NULL;
  ts_cluster c;
  if (ts_comm_world(&w) || ts_comm_topo_create(w, &t)) die("topology");
  if (ts_cluster_load(cluster, &c)) die("cluster");
  int me = ts_comm_rank(w), N = ts_comm_size(w), H = ts_comm_topo_num_hosts(t), L = H ? N / H : N;
  char desc[512];
  ts_comm_topo_describe(t, desc, sizeof desc);
  if (!me)
    printf("# %d ranks on %s; cluster %s: inside %.3g GB/s %.3g us, between hosts %.3g GB/s per device (link %.3g GB/s) %.3g us\n",
           N, desc, c.name, c.intra_bw / 1e9, c.intra_latency * 1e6, c.inter_bw / 1e9, c.inter_bw * L / 1e9,
           c.inter_latency * 1e6);
  double rows[16][8];
  int nrows = 0;
  for (const char *p = mib; *p && nrows < 16;) {
    double m = strtod(p, (char **)&p);
    if (*p == ',') p++;
    if (m <= 0) break;
    size_t n = (size_t)(m * 1024 * 1024 / sizeof(float));
    float *buf = calloc(n, sizeof(float)), *snd = calloc(n, sizeof(float));
    double *tf = malloc(sizeof(double) * (size_t)reps * 6), *th = tf + reps, *ts = th + reps, *tp = ts + reps, part[3];
    if (!buf || !snd || !tf) die("memory");
    timed(w, t, buf, NULL, n, 0, NULL); /* warm-up all three */
    timed(w, t, buf, NULL, n, 1, NULL);
    timed(w, t, buf, snd, n, 0, NULL);
    for (int r = 0; r < reps; r++) /* the order rotating: flat, hier, send; hier, send, flat; ... */
      for (int j = 0; j < 3; j++) {
        int v = (r + j) % 3;
        double x = timed(w, t, buf, v == 2 ? snd : NULL, n, v == 1, part);
        if (v == 0) tf[r] = x;
        if (v == 2) ts[r] = x;
        if (v == 1) {
          th[r] = x;
          for (int i = 0; i < 3; i++) tp[i * reps + r] = part[i];
        }
      }
    double bytes = (double)n * sizeof(float);
    double mf = median(tf, reps), mh = median(th, reps), ms = median(ts, reps);
    double mp[3] = {median(tp, reps), median(tp + reps, reps), median(tp + 2 * reps, reps)};
    /* the model's parts (ts_cluster_allreduce_hier): inside, between the leaders, broadcast */
    ts_cluster parts = c; /* from the parts' links (not the whole's measured line, which prices the whole) */
    parts.hier_allreduce_bw = parts.hier_allreduce_latency = 0;
    ts_cluster in = parts, lead = parts;
    in.inter_bw = lead.intra_bw = 1e30; in.inter_latency = lead.intra_latency = 0;
    in.intra_bcast_bw = lead.intra_bcast_bw = 1e30; in.intra_bcast_latency = lead.intra_bcast_latency = 0;
    double pin = ts_cluster_allreduce_hier(&in, H, L, bytes), plead = ts_cluster_allreduce_hier(&lead, H, L, bytes);
    double pbc = ts_cluster_allreduce_hier(&parts, H, L, bytes) - pin - plead;
    if (!me)
      printf("# %g MiB hierarchical parts, measured (predicted) ms: inside %.2f (%.2f), between leaders %.2f (%.2f), "
             "broadcast %.2f (%.2f)\n", m, mp[0] * 1e3, pin * 1e3, mp[1] * 1e3, plead * 1e3, mp[2] * 1e3, pbc * 1e3);
    double pf = ts_cluster_allreduce_flat(&c, H, L, bytes), ph = ts_cluster_allreduce_hier(&c, H, L, bytes);
    ts_cluster links = c; /* the flat one priced from the links alone (not the measured line) */
    links.flat_allreduce_bw = links.flat_allreduce_latency = 0;
    double pfl = ts_cluster_allreduce_flat(&links, H, L, bytes);
    if (!me && c.flat_allreduce_bw > 0)
      printf("# %g MiB flat priced from the links alone (libnbc's binomial tree): %.2f ms, measured/predicted %.2f\n", m,
             pfl * 1e3, mf / pfl);
    double ps = ts_cluster_allreduce_flat_send(&c, H, L, bytes);
    double *row = rows[nrows++];
    row[0] = m; row[1] = mf; row[2] = pf; row[3] = mh; row[4] = ph; row[5] = ms; row[6] = ps; row[7] = 0;
    if (!me)
      printf("{\"name\":\"cluster_allreduce\",\"mib\":%g,\"ranks\":%d,\"hosts\":%d,\"flat_ms\":%.3f,\"flat_pred_ms\":%.3f,"
             "\"hier_ms\":%.3f,\"hier_pred_ms\":%.3f,\"send_ms\":%.3f,\"send_pred_ms\":%.3f,\"reps\":%d}\n",
             m, N, H, mf * 1e3, pf * 1e3, mh * 1e3, ph * 1e3, ms * 1e3, ps * 1e3, reps);
    free(tf);
    free(buf);
    free(snd);
  }
  if (!me) {
    /* the checks: each prediction within 20% of its measurement; the model's choice the
     * one measured faster */
    int fails = 0;
    static const char *name[3] = {"flat", "hier", "send"};
    printf("%6s %9s %9s %6s %5s %9s %9s %6s %5s %9s %9s %6s %5s %7s %7s %6s\n", "MiB", "flat ms", "pred", "ratio", "",
           "hier ms", "pred", "ratio", "", "send ms", "pred", "ratio", "", "fastest", "model", "choice");
    for (int i = 0; i < nrows; i++) {
      double *r = rows[i], qf = r[1] / r[2], qh = r[3] / r[4], qs = r[6] < 1e300 ? r[5] / r[6] : 0;
      int okf = qf >= 1 / 1.2 && qf <= 1.2, okh = qh >= 1 / 1.2 && qh <= 1.2, oks = qs >= 1 / 1.2 && qs <= 1.2;
      int fast = r[3] < r[1] && r[3] < r[5] ? 1 : r[5] < r[1] ? 2 : 0;
      int model = r[4] < (r[2] < r[6] ? r[2] : r[6]) ? 1 : r[6] < r[2] ? 2 : 0; /* the reducer's rule */
      int okc = fast == model;
      fails += !okf + !okh + (r[6] < 1e300 && !oks) + !okc;
      printf("%6g %9.2f %9.2f %6.2f %5s %9.2f %9.2f %6.2f %5s %9.2f %9.2f %6.2f %5s %7s %7s %6s\n", r[0], r[1] * 1e3,
             r[2] * 1e3, qf, okf ? "PASS" : "FAIL", r[3] * 1e3, r[4] * 1e3, qh, okh ? "PASS" : "FAIL", r[5] * 1e3,
             r[6] < 1e300 ? r[6] * 1e3 : 0.0, qs, r[6] < 1e300 ? (oks ? "PASS" : "FAIL") : "-", name[fast], name[model],
             okc ? "PASS" : "FAIL");
    }
    printf("# within 20%%: measured/predicted in [0.83, 1.2]; choice: the model picks the one measured faster; %d check%s "
           "failed\n", fails, fails == 1 ? "" : "s");
  }
  if (c.reduce_scatter_bw > 0 || c.allgather_bw > 0) zero_table(w, &c, H, L, mib, reps);
  ts_comm_topo_free(t);
  ts_comm_finalize();
  return 0;
}
