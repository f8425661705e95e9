/* Internal (not installed): the planner, cluster descriptions and the cost model (pure: no MPI, no tensors).
 *
 * A cluster says what one device computes and holds and how fast its links are, per level
 * (inside a node, between nodes), as an alpha-beta model; the cost model prices a rank's graph
 * on it: compute from each operator's FLOPs (GEMM-like families at an achieved fraction of the
 * peak) or bytes (the rest, at the achieved memory bandwidth), collectives from the alpha-beta
 * model of ring algorithms on the link level their group spans.
 *
 *   ts_cluster c;
 *   ts_cluster_builtin("dgx-a100-80g", &c);           // or ts_cluster_load("cluster.yaml", &c)
 *   ts_cost_breakdown b;
 *   ts_cost_graph(&c, g, TS_F32, live, &b);           // b.compute_s, b.comm_s per run of g
 *   double t = ts_cluster_coll_time(&c, TS_COST_ALLREDUCE, 8, 0, 64e6);
 */
#ifndef TS_PLANNER_PLANNER_H
#define TS_PLANNER_PLANNER_H

#include <stdio.h>

#include "graph/graph_ir.h"
#include "tessera/cluster.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The achieved fraction of the peak the cost model prices GEMM-like op `op` at: its family's
 * efficiency_* when set, else gemm_efficiency. */
double ts_cluster_efficiency(const ts_cluster *c, ts_op op);

typedef enum {
  TS_COST_ALLREDUCE = 0,
  TS_COST_ALLGATHER,
  TS_COST_REDUCE_SCATTER,
  TS_COST_ALLTOALL,
  TS_COST_BROADCAST,
  TS_COST_P2P,
} ts_cost_coll;

/* Seconds a collective of `group` devices moving `bytes` (the whole tensor: the all-reduce's
 * input, the all-gather's output, the reduce-scatter's input, one message for p2p) takes with ring
 * algorithms: all-reduce 2(g-1)/g bytes/bw + 2(g-1) alpha, all-gather / reduce-scatter / all-to-all
 * (g-1)/g bytes/bw + (g-1) alpha, broadcast bytes/bw + log2(g) alpha, p2p bytes/bw + alpha; on
 * the links between nodes when the group spans nodes (span = 1), else inside one. */
double ts_cluster_coll_time(const ts_cluster *c, ts_cost_coll kind, int group, int span, double bytes);
/* Seconds of an all-reduce of `bytes` over `hosts` hosts of `local` ranks each, the ranks of a host
 * consecutive (mpirun's by-slot placement), a node's link to the others carrying
 * link = inter_bw * local bytes/s per direction (inter_bw is a device's share of it), priced as
 * OpenMPI runs Tessera's all-reduce (in place, non-blocking: libnbc's binomial tree, a reduce to
 * rank 0 then a broadcast from it, the whole message in every round; docs/cluster.md):
 *  - flat: the reduce's log2(L) rounds inside a host and log2(H) between hosts (one stream per
 *    link), the broadcast's log2(L) inside and log2(H) between hosts in which every rank of a
 *    sending host sends (L streams share its link):
 *      2 log2(L) (intra_latency + bytes/intra_bw) + log2(H) (2 inter_latency + (1 + L) bytes/link);
 *    the measured flat_allreduce_* instead when set and the layout is the calibrated one
 *    (hosts == nodes, local == devices_per_node); one host: ts_cluster_coll_time inside the node;
 *  - hierarchical: the binomial all-reduce inside each host (2 log2(L) intra rounds), between the
 *    hosts' leaders (2 log2(H) rounds of inter_latency + bytes/link), a broadcast inside each host
 *    (log2(L) rounds of intra_bcast_*, or intra_* when not measured).
 * log2 rounds up. */
double ts_cluster_allreduce_flat(const ts_cluster *c, int hosts, int local, double bytes);
double ts_cluster_allreduce_hier(const ts_cluster *c, int hosts, int local, double bytes);
/* Seconds of optimizer sharding's reduce-scatter of a `bytes` buffer over `hosts` hosts of `local`
 * ranks as `tessera calibrate` measured it on that layout: MPI's (ring 0) or the ring of
 * point-to-point steps (ring 1); HUGE_VAL where not measured (another layout, or no calibration). */
double ts_cluster_reduce_scatter_measured(const ts_cluster *c, int hosts, int local, double bytes, int ring);
/* The all-gather of a buffer of `bytes` (the whole, every rank's part) as calibrated on this very
 * layout: MPI's (ring 0) or the ring's (1); HUGE_VAL where it was not measured. */
double ts_cluster_allgather_measured(const ts_cluster *c, int hosts, int local, double bytes, int ring);
/* The flat all-reduce from a separate send buffer (its copy included), priced only where
 * measured: flat_allreduce_send_* on the calibrated layout; HUGE_VAL otherwise (never chosen: the
 * algorithm MPI runs out of place is its own choice, which only a measurement shows). */
double ts_cluster_allreduce_flat_send(const ts_cluster *c, int hosts, int local, double bytes);
/* The least-squares fit of secs[i] = latency + bytes[i] * sec_per_byte over n >= 2 points, each
 * weighted by 1/secs[i]^2 (relative errors: small and large messages count alike); a negative
 * latency is refitted as 0. TS_EINVAL when n < 2, a point is not positive, or the slope is not
 * positive (the times do not grow with the size). Exact on data that follow the line. */
int ts_cluster_fit_alpha_beta(const double *bytes, const double *secs, int n, double *latency, double *sec_per_byte);
/* Whether a group of `group` ranks whose members are `stride` ranks apart spans several nodes
 * (ranks are numbered node by node). */
int ts_cluster_spans(const ts_cluster *c, int group, int stride);

typedef struct {
  double compute_s;     /* operators */
  double gemm_s, other_s;
  double comm_s;        /* collectives and point to point in the graph */
  double flops, bytes;  /* counted */
  int nodes;
} ts_cost_breakdown;

/* The time of one run of g on one device of c: each node that runs (live[i] != 0; live NULL:
 * every node) priced by its family; collectives by their group size (slot's ranks neighbouring,
 * as tensor-parallel groups are placed). dt: TS_F32 prices the graph as built (each GEMM-like op
 * at the peak of its own dtype: a graph rewritten by the amp pass, ts_graph_amp, is priced as it
 * runs); TS_BF16 / TS_F16 price an f32 graph as if it all ran in 16-bit (GEMMs at
 * peak_flops_bf16, every f32 value read, written or communicated as 2 bytes). */
int ts_cost_graph(const ts_cluster *c, const ts_graph *g, ts_dtype dt, const char *live, ts_cost_breakdown *out);

#ifdef __cplusplus
}
#endif
#endif
