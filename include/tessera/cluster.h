/* Tessera cluster descriptions: what one device computes and holds and how fast its links are
 * (inside a node, between nodes), as the cost model and `tessera plan --cluster` read them.
 * Built-in ones (ts_cluster_builtin: "local", "dgx-a100-80g", ...), YAML files
 * (ts_cluster_load / ts_cluster_save; docs/auto-parallel.md lists the keys) and the machine
 * measured by `tessera calibrate` (ts_calibrate, tessera/train.h).
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_cluster c;
 *   if (ts_cluster_load("dgx-a100-80g", &c)) fprintf(stderr, "%s\n", ts_last_error());
 *   else ts_cluster_describe(&c, stdout);
 */
#ifndef TESSERA_CLUSTER_H
#define TESSERA_CLUSTER_H

#include <stdio.h>

#include "tessera/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char name[64];
  char device[64];
  char source[512];          /* where the numbers come from (measured here, a datasheet) */
  int devices_per_node, nodes;
  double peak_flops_f32;     /* per device, FLOP/s */
  double peak_flops_bf16;    /* per device, FLOP/s (0: as f32) */
  double gemm_efficiency;    /* achieved fraction of the peak by GEMM-like ops (matmul, conv, attention) */
  double mem_bandwidth;      /* achieved bytes/s of memory-bound ops */
  double mem_bytes;          /* per device */
  double intra_bw, intra_latency; /* a device's link inside a node: bytes/s per direction, seconds */
  double inter_bw, inter_latency; /* a device's share of its node's links to other nodes */
  double op_overhead;        /* seconds every operator costs beyond its work (dispatch, launch) */
  /* achieved fraction of the peak (of the dtype they run in) per GEMM-like family, measured on a
   * model's own operators by `tessera calibrate CONFIG` (ts_calibrate_model); 0: gemm_efficiency */
  double efficiency_matmul;    /* matmul, dense */
  double efficiency_conv;      /* conv2d forward, backward data, backward weights */
  double efficiency_attention; /* fused attention forward and backward */
  /* measured by `tessera calibrate` on several hosts (0: priced from the links above):
   * the broadcast inside a node, ceil(log2 g) rounds of intra_bcast_latency + bytes / intra_bcast_bw;
   * the flat all-reduce over every device of nodes x devices_per_node as it ran there (OpenMPI's
   * algorithm, whatever it was), flat_allreduce_latency + bytes / flat_allreduce_bw */
  double intra_bcast_latency, intra_bcast_bw;
  double flat_allreduce_latency, flat_allreduce_bw;
  /* the same flat all-reduce from a separate send buffer (the gradients copied first): OpenMPI may
   * then run a ring or Rabenseifner's algorithm where in place it runs a binomial tree */
  double flat_allreduce_send_latency, flat_allreduce_send_bw;
  /* the hierarchical all-reduce as the gradient buckets run it (non-blocking, its three steps
   * chained as each completes: ts_comm_iallreduce_hier), measured whole over nodes x
   * devices_per_node: hier_allreduce_latency + bytes / hier_allreduce_bw (0: priced from the parts) */
  double hier_allreduce_latency, hier_allreduce_bw;
  /* optimizer sharding's bucket reduce-scatter over nodes x devices_per_node as measured whole
   * (0: not measured): MPI's non-blocking one (in place), and the ring of point-to-point steps
   * (ts_comm_ireduce_scatter_ring) */
  double reduce_scatter_latency, reduce_scatter_bw;
  double reduce_scatter_ring_latency, reduce_scatter_ring_bw;
  /* and the all-gather of the updated parameters that follows it, measured the same way: MPI's
   * non-blocking all-gather (in place) and the ring (ts_comm_iallgatherv_ring) */
  double allgather_latency, allgather_bw;
  double allgather_ring_latency, allgather_ring_bw;
  /* a GPU's copies between pinned host memory and the device, bytes/s each way (the batches'
   * path, and the staged collectives' of ranks sharing a GPU); 0: not measured (a CPU) */
  double h2d_bw, d2h_bw;
} ts_cluster;

/* The built-in descriptions: "dgx-a100-80g" (8 x A100 80 GB per node, NVLink, 8 x 200 Gb/s
 * InfiniBand), "dgx-h100" and "dgx-h200" (8 x H100 80 GB / H200 141 GB, NVLink 4, 8 x 400 Gb/s
 * InfiniBand), "p3.16xlarge" (8 x V100 16 GB, NVLink, 25 Gb/s between nodes) and "local" (this
 * machine: the calibration cached by `tessera calibrate`; before one, a conservative built-in
 * estimate whose source says so, announced once per process on rank 0 through the logging hook).
 * TS_ECONFIG naming the known names for another name. */
int ts_cluster_builtin(const char *name, ts_cluster *out);
/* A cluster from a YAML file (the keys of ts_cluster, as ts_cluster_save writes them); a name
 * that is not a readable file is tried as a built-in. Errors name the file, the key and the
 * reason (unknown key, not a positive number, missing key). */
int ts_cluster_load(const char *path_or_name, ts_cluster *out);
/* Writes c as YAML to path atomically (temp file, fsync, rename). */
int ts_cluster_save(const ts_cluster *c, const char *path);
/* Checks that every field is usable (positive, devices > 0); TS_ECONFIG naming the field. */
int ts_cluster_validate(const ts_cluster *c, const char *label);
/* Writes a one-paragraph description. */
void ts_cluster_describe(const ts_cluster *c, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
