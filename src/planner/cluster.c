/* Cluster descriptions (src/planner/planner.h): built-ins, YAML files, the alpha-beta model. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "../base/afile.h"
#include "../base/rfile.h"
#include <stddef.h>
#include "../base/text.h"
#include "planner/planner.h"

/* The fields, for files and messages: name, offset, 0 string / 1 int / 2 double, and whether the
 * value may be 0 (OPT_ZERO) and the key left out of a file (OPT_ABSENT: it is then 0). */
enum { OPT_ZERO = 1, OPT_ABSENT = 2 };
typedef struct {
  const char *key;
  size_t off;
  int kind, opt;
  const char *help;
} field;
#define F(k, kind, opt, h) {#k, offsetof(ts_cluster, k), kind, opt, h}
static const field fields[] = {
    F(name, 0, 0, "the cluster's name"),
    F(device, 0, OPT_ABSENT, "the device kind"),
    F(source, 0, OPT_ABSENT, "where the numbers come from"),
    F(devices_per_node, 1, 0, "devices in one node"),
    F(nodes, 1, 0, "nodes"),
    F(peak_flops_f32, 2, 0, "peak FLOP/s of one device in f32"),
    F(peak_flops_bf16, 2, OPT_ZERO | OPT_ABSENT, "peak FLOP/s of one device in bf16 (0: as f32)"),
    F(gemm_efficiency, 2, 0, "achieved fraction of the peak by matmul, convolution and attention"),
    F(mem_bandwidth, 2, 0, "achieved memory bandwidth of memory-bound ops, bytes/s"),
    F(mem_bytes, 2, 0, "memory of one device, bytes"),
    F(intra_bw, 2, 0, "a device's link inside a node, bytes/s per direction"),
    F(intra_latency, 2, OPT_ZERO, "latency of a message inside a node, s"),
    F(inter_bw, 2, 0, "a device's share of its node's links to other nodes, bytes/s per direction"),
    F(inter_latency, 2, OPT_ZERO, "latency of a message between nodes, s"),
    F(op_overhead, 2, OPT_ZERO | OPT_ABSENT, "seconds every operator costs beyond its work (dispatch, kernel launch)"),
    F(efficiency_matmul, 2, OPT_ZERO | OPT_ABSENT,
      "achieved fraction of the peak by matmul and dense (0: gemm_efficiency); tessera calibrate CONFIG measures it"),
    F(efficiency_conv, 2, OPT_ZERO | OPT_ABSENT,
      "achieved fraction of the peak by convolutions, forward and backward (0: gemm_efficiency)"),
    F(efficiency_attention, 2, OPT_ZERO | OPT_ABSENT,
      "achieved fraction of the peak by fused attention, forward and backward (0: gemm_efficiency)"),
    F(intra_bcast_latency, 2, OPT_ZERO | OPT_ABSENT, "latency of a broadcast round inside a node, s (0: intra_latency)"),
    F(intra_bcast_bw, 2, OPT_ZERO | OPT_ABSENT, "bytes/s of a broadcast round inside a node (0: intra_bw)"),
    F(flat_allreduce_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of the flat all-reduce over nodes x devices_per_node as measured, s (with flat_allreduce_bw)"),
    F(flat_allreduce_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s of the flat all-reduce over nodes x devices_per_node as measured (0: priced from the links)"),
    F(flat_allreduce_send_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of the flat all-reduce from a separate send buffer over nodes x devices_per_node as measured, s"),
    F(flat_allreduce_send_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s of the flat all-reduce from a separate send buffer, its copy included, as measured (0: not measured: "
      "never chosen)"),
    F(hier_allreduce_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of the hierarchical all-reduce over nodes x devices_per_node as the buckets run it (non-blocking, "
      "chained), measured whole, s"),
    F(hier_allreduce_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s of that hierarchical all-reduce as measured (0: priced from the parts: intra_*, inter_*, intra_bcast_*)"),
    F(reduce_scatter_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of MPI's non-blocking reduce-scatter (in place) over nodes x devices_per_node as measured, s"),
    F(reduce_scatter_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s (of the whole buffer) of that reduce-scatter as measured (0: not measured)"),
    F(reduce_scatter_ring_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of the ring reduce-scatter (point-to-point steps) over nodes x devices_per_node as measured, s"),
    F(reduce_scatter_ring_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s (of the whole buffer) of the ring reduce-scatter as measured (0: not measured)"),
    F(allgather_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of MPI's non-blocking all-gather (in place) over nodes x devices_per_node as measured, s"),
    F(allgather_bw, 2, OPT_ZERO | OPT_ABSENT, "bytes/s (of the whole buffer) of that all-gather as measured (0: not measured)"),
    F(allgather_ring_latency, 2, OPT_ZERO | OPT_ABSENT,
      "latency of the ring all-gather (point-to-point steps) over nodes x devices_per_node as measured, s"),
    F(allgather_ring_bw, 2, OPT_ZERO | OPT_ABSENT,
      "bytes/s (of the whole buffer) of the ring all-gather as measured (0: not measured)"),
    F(h2d_bw, 2, OPT_ZERO | OPT_ABSENT,
      "a GPU's copies from pinned host memory to the device, bytes/s (0: not measured; a CPU)"),
    F(d2h_bw, 2, OPT_ZERO | OPT_ABSENT, "a GPU's copies from the device to pinned host memory, bytes/s (0: not measured)"),
};
#undef F
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* ---- built-ins ----
 * dgx-a100-80g: NVIDIA DGX A100 datasheet (8 x A100 80 GB SXM, 312 TFLOP/s bf16 dense, 19.5
 * TFLOP/s f32, HBM2e 2,039 GB/s; NVLink 3: 600 GB/s per GPU both directions; 8 x 200 Gb/s HDR
 * InfiniBand per node, one per GPU: 25 GB/s; PCIe Gen4 x16 to the host, about 25 GB/s each way).
 * Achieved fractions from Megatron-LM (Narayanan et
 * al. 2021: 135-163 TFLOP/s per GPU end to end on GPT, about 0.5 of the peak; GEMMs alone reach
 * about 0.7) and NCCL's all-reduce bus bandwidth (about 230 GB/s on NVLink 3).
 * p3.16xlarge: AWS instance page and the V100 datasheet (8 x V100 16 GB SXM2, 125 TFLOP/s f16
 * tensor, 15.7 TFLOP/s f32, HBM2 900 GB/s; NVLink 2: 300 GB/s per GPU both directions; 25 Gb/s
 * network per instance shared by its 8 GPUs; PCIe Gen3 x16, about 12 GB/s). Operator overheads:
 * a CUDA kernel launch, 4-5 us.
 * These numbers predate pricing Megatron-LM's Table 1 (docs/auto-parallel.md) and were not changed
 * to fit it: the table checks them.
 * dgx-h100: NVIDIA DGX H100 datasheet and the H100 SXM5 product brief (8 x H100 80 GB SXM5, 989
 * TFLOP/s bf16 dense, 67 TFLOP/s f32, HBM3 3.35 TB/s; NVLink 4: 900 GB/s per GPU both directions;
 * 8 x 400 Gb/s NDR InfiniBand per node, one per GPU: 50 GB/s). Achieved: GEMMs about 0.7 of the
 * bf16 peak (cuBLAS's large bf16 GEMMs, 650-750 TFLOP/s), memory-bound kernels about 0.8 of HBM3,
 * NCCL's all-reduce bus bandwidth about 370 GB/s on NVLink 4 (without NVLink SHARP), about 46 GB/s
 * per GPU across NDR, PCIe Gen5 x16 to the host about 55 GB/s each way (of 64).
 * dgx-h200: the same node with H200 141 GB SXM (HBM3e 4.8 TB/s; the H100's compute and links;
 * NVIDIA H200 product brief, HGX H200 datasheet); memory-bound kernels about 0.8 of HBM3e.
 * Both stand beside what `tessera calibrate` measures on an H200 (docs/gpu.md). */
static const ts_cluster k_dgx = {"dgx-a100-80g", "A100-SXM4-80GB",
                                 "NVIDIA DGX A100 datasheet; Megatron-LM (Narayanan et al. 2021); NCCL bus bandwidth",
                                 8, 1, 19.5e12, 312e12, 0.7, 1.6e12, 80e9, 230e9, 5e-6, 23e9, 10e-6, 4e-6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25e9, 25e9};
static const ts_cluster k_h100 = {"dgx-h100", "H100-SXM5-80GB",
                                  "NVIDIA DGX H100 datasheet, H100 SXM5 product brief; cuBLAS bf16 GEMM rates; NCCL bus "
                                  "bandwidth on NVLink 4",
                                  8, 1, 67e12, 989e12, 0.7, 2.7e12, 80e9, 370e9, 5e-6, 46e9, 10e-6, 4e-6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 55e9, 55e9};
static const ts_cluster k_h200 = {"dgx-h200", "H200-SXM-141GB",
                                  "NVIDIA H200 product brief, HGX H200 datasheet; the H100's compute and links",
                                  8, 1, 67e12, 989e12, 0.7, 3.8e12, 141e9, 370e9, 5e-6, 46e9, 10e-6, 4e-6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 55e9, 55e9};
static const ts_cluster k_p3 = {"p3.16xlarge", "V100-SXM2-16GB", "AWS p3.16xlarge instance page; NVIDIA V100 datasheet",
                                8, 1, 15.7e12, 125e12, 0.6, 750e9, 16e9, 120e9, 6e-6, 25e9 / 8 / 8, 30e-6, 5e-6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12e9, 12e9};

/* The cache `tessera calibrate` writes for "local": $TESSERA_CLUSTER_CACHE, else
 * $XDG_CACHE_HOME/tessera/cluster-local.yaml, else ~/.cache/tessera/cluster-local.yaml. */
static void local_path(char *buf, size_t cap) {
  const char *e = getenv("TESSERA_CLUSTER_CACHE");
  const char *h = getenv("HOME"), *x = getenv("XDG_CACHE_HOME"); /* XDG: an absolute path, else unset */
  if (e && *e) snprintf(buf, cap, "%s", e);
  else if (x && x[0] == '/') snprintf(buf, cap, "%s/tessera/cluster-local.yaml", x);
  else snprintf(buf, cap, "%s/.cache/tessera/cluster-local.yaml", h && *h ? h : "/tmp");
}

/* "local" before `tessera calibrate` has run: a conservative estimate of one CPU rank of this
 * machine, so that auto_parallel and `tessera plan` work on a first run (MindSpore asks for no
 * calibration). Per rank: 50 GFLOP/s f32 peak at 50% for GEMMs (one core with AVX2 FMA peaks
 * near 100: measured 114 here), 10 GB/s memory-bound, 5 GB/s + 5 us between ranks (shared
 * memory, through MPI), 5 us per operator; the machine's memory (rounded down to 4 GiB, at least
 * 1 GiB). Every priced number but the memory is a constant, so the ranks of a job on several
 * hosts plan alike; the cores only name the device. Says so once per process, on rank 0, through
 * the logging hook. */
static void local_estimate(const char *cache, ts_cluster *out) {
  static int said;
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  if (cores < 1) cores = 1;
  const double gib = 1024.0 * 1024 * 1024;
  double mem = pages > 0 && psz > 0 ? (double)pages * (double)psz : 4 * gib;
  mem = floor(mem / (4 * gib)) * 4 * gib;
  if (mem < gib) mem = gib;
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "local");
  snprintf(out->device, sizeof out->device, "CPU rank (%ld cores)", cores);
  snprintf(out->source, sizeof out->source,
           "a built-in estimate (%.200s is missing): 50 GFLOP/s f32 per rank at 50%% for GEMMs, 10 GB/s memory-bound, "
           "5 GB/s + 5 us between ranks; `tessera calibrate` measures this machine", cache);
  out->devices_per_node = (int)(cores < 4096 ? cores : 4096);
  out->nodes = 1;
  out->peak_flops_f32 = 50e9;
  out->gemm_efficiency = 0.5;
  out->mem_bandwidth = 10e9;
  out->mem_bytes = mem;
  out->intra_bw = out->inter_bw = 5e9;
  out->intra_latency = out->inter_latency = 5e-6;
  out->op_overhead = 5e-6;
  int r = 0, n = 1;
  ts_job_rank(&r, &n);
  if (!said++ && r == 0)
    ts_log(TS_LOG_WARN, "cluster 'local': not calibrated on this machine (%s is missing): planning with a built-in "
           "estimate of %ld cores, %.0f GiB (50 GFLOP/s f32 and 5 GB/s links per rank); `tessera calibrate` (under "
           "mpirun -n 2) measures it", cache, cores, mem / gib);
}

int ts_cluster_builtin(const char *name, ts_cluster *out) {
  memset(out, 0, sizeof *out);
  if (name && !strcmp(name, "dgx-a100-80g")) *out = k_dgx;
  else if (name && !strcmp(name, "p3.16xlarge")) *out = k_p3;
  else if (name && !strcmp(name, "dgx-h100")) *out = k_h100;
  else if (name && !strcmp(name, "dgx-h200")) *out = k_h200;
  else if (name && !strcmp(name, "local")) {
    char p[512];
    local_path(p, sizeof p);
    FILE *f = fopen(p, "r");
    if (!f) {
      local_estimate(p, out);
      return TS_OK;
    }
    fclose(f);
    return ts_cluster_load(p, out);
  } else {
    return ts_error_set(TS_ECONFIG, "cluster '%s': not a file and not a built-in (dgx-a100-80g, dgx-h100, dgx-h200, p3.16xlarge, "
                        "local)",
                        name ? name : "");
  }
  return TS_OK;
}

int ts_cluster_validate(const ts_cluster *c, const char *label) {
  for (int i = 0; i < NFIELDS; i++) {
    const field *f = &fields[i];
    const char *p = (const char *)c + f->off;
    if (f->kind == 1 && *(const int *)p < 1)
      return ts_error_set(TS_ECONFIG, "%s: %s must be at least 1 (%s)", label, f->key, f->help);
    if (f->kind == 2) {
      double v = *(const double *)p;
      if (!isfinite(v) || v < 0 || (v == 0 && !(f->opt & OPT_ZERO)))
        return ts_error_set(TS_ECONFIG, "%s: %s must be a positive number (%s), got %g", label, f->key, f->help, v);
    }
  }
  const double eff[] = {c->gemm_efficiency, c->efficiency_matmul, c->efficiency_conv, c->efficiency_attention};
  const char *effk[] = {"gemm_efficiency", "efficiency_matmul", "efficiency_conv", "efficiency_attention"};
  for (int i = 0; i < 4; i++)
    if (eff[i] > 1)
      return ts_error_set(TS_ECONFIG, "%s: %s is a fraction of the peak, at most 1, got %g", label, effk[i], eff[i]);
  return TS_OK;
}

/* s for a one-line message: control characters escaped as JSON does, cut at 60 characters. */
static const char *shown(const char *s, char *buf, size_t cap) {
  ts__sb b;
  memset(&b, 0, sizeof b);
  ts__sb_json_str(&b, s);
  snprintf(buf, cap, "%.60s%s", b.s ? b.s : "", b.s && b.n > 60 ? "..." : "");
  free(b.s);
  return buf;
}

int ts_cluster_load(const char *path_or_name, ts_cluster *out) {
  memset(out, 0, sizeof *out);
  if (!path_or_name) return ts_error_set(TS_EINVAL, "ts_cluster_load: no name");
  int looks_like_file = strchr(path_or_name, '/') || strstr(path_or_name, ".yaml") || strstr(path_or_name, ".yml");
  FILE *f = NULL;
  if (!looks_like_file) {
    FILE *probe = fopen(path_or_name, "r");
    if (!probe) return ts_cluster_builtin(path_or_name, out);
    fclose(probe);
  }
  int frc = ts__file_fopen_read(path_or_name, "cluster file", &f);
  if (frc) { /* missing, a folder, unreadable: the configuration names a file that is not one (exit 2) */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ts_last_error());
    return ts_error_set(frc == TS_ENOMEM ? TS_ENOMEM : TS_ECONFIG, "%s", msg);
  }
  yaml_parser_t y;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&y)) {
    fclose(f);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path_or_name);
  }
  yaml_parser_set_input_file(&y, f);
  int ok = yaml_parser_load(&y, &doc), rc = TS_OK;
  if (!ok)
    rc = ts_error_set(TS_EFORMAT, "%s:%zu:%zu: %s", path_or_name, y.problem_mark.line + 1, y.problem_mark.column + 1,
                      y.problem ? y.problem : "YAML error");
  yaml_node_t *root = ok ? yaml_document_get_root_node(&doc) : NULL;
  if (ok && (!root || root->type != YAML_MAPPING_NODE))
    rc = ts_error_set(TS_ECONFIG, "%s: expected a mapping of cluster keys", path_or_name);
  int seen[NFIELDS] = {0};
  for (yaml_node_pair_t *pr = root && !rc ? root->data.mapping.pairs.start : NULL;
       pr && pr < root->data.mapping.pairs.top && !rc; pr++) {
    yaml_node_t *k = yaml_document_get_node(&doc, pr->key), *v = yaml_document_get_node(&doc, pr->value);
    const char *key = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "?";
    int i = 0;
    while (i < NFIELDS && strcmp(fields[i].key, key)) i++;
    if (i == NFIELDS) {
      char known[512] = "";
      size_t n = 0;
      for (int q = 0; q < NFIELDS; q++) ts__app(known, sizeof known, &n, "%s%s", q ? ", " : "", fields[q].key);
      char kb[80];
      rc = ts_error_set(TS_ECONFIG, "%s:%zu: unknown cluster key '%s' (known: %s)", path_or_name, k->start_mark.line + 1,
                        shown(key, kb, sizeof kb), known);
      break;
    }
    if (!v || v->type != YAML_SCALAR_NODE) {
      rc = ts_error_set(TS_ECONFIG, "%s:%zu: %s: expected a value", path_or_name, k->start_mark.line + 1, key);
      break;
    }
    if (seen[i]) { /* the config loader's rule and message: a key given twice is refused */
      rc = ts_error_set(TS_ECONFIG, "%s:%zu:%zu: duplicate key '%s' (first at line %d)", path_or_name,
                        k->start_mark.line + 1, k->start_mark.column + 1, key, seen[i]);
      break;
    }
    seen[i] = (int)k->start_mark.line + 1;
    const char *s = (const char *)v->data.scalar.value;
    char *p = (char *)out + fields[i].off, *end = NULL;
    if (fields[i].kind == 0) {
      snprintf(p, !strcmp(key, "source") ? sizeof out->source : sizeof out->name, "%s", s);
      continue;
    }
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(d) || (fields[i].kind == 1 && (d != floor(d) || d > 1e9))) {
      char vb[80];
      rc = ts_error_set(TS_ECONFIG, "%s:%zu: %s: expected %s, got '%s'", path_or_name, v->start_mark.line + 1, key,
                        fields[i].kind == 1 ? "a whole number" : "a number", shown(s, vb, sizeof vb));
      break;
    }
    if (fields[i].kind == 1) *(int *)p = (int)d;
    else *(double *)p = d;
  }
  for (int i = 0; i < NFIELDS && !rc; i++)
    if (!seen[i] && !(fields[i].opt & OPT_ABSENT))
      rc = ts_error_set(TS_ECONFIG, "%s: missing key %s (%s)", path_or_name, fields[i].key, fields[i].help);
  if (ok) yaml_document_delete(&doc);
  yaml_parser_delete(&y);
  fclose(f);
  if (!rc) rc = ts_cluster_validate(out, path_or_name);
  return rc;
}

int ts_cluster_save(const ts_cluster *c, const char *path) {
  int rc = ts_cluster_validate(c, path);
  if (rc) return rc;
  ts__sb b;
  memset(&b, 0, sizeof b);
  ts__sb_printf(&b, "# Tessera cluster description (docs/auto-parallel.md)\n");
  for (int i = 0; i < NFIELDS; i++) {
    const char *p = (const char *)c + fields[i].off;
    ts__sb_printf(&b, "%s: ", fields[i].key);
    if (fields[i].kind == 0) {
      ts__sb_printf(&b, "\"");
      ts__sb_json_str(&b, p);
      ts__sb_printf(&b, "\"");
    }
    else if (fields[i].kind == 1) ts__sb_printf(&b, "%d", *(const int *)p);
    else ts__sb_printf(&b, "%.6g", *(const double *)p);
    ts__sb_printf(&b, "   # %s\n", fields[i].help);
  }
  if (b.failed) {
    free(b.s);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  ts__afile *af = NULL;
  if (!(rc = ts__afile_open(path, &af))) {
    if ((rc = ts__afile_write(af, b.s, b.n))) ts__afile_abort(af);
    else rc = ts__afile_commit(af);
  }
  free(b.s);
  return rc;
}

void ts_cluster_describe(const ts_cluster *c, FILE *out) {
  char fam[160] = "";
  if (c->efficiency_matmul > 0 || c->efficiency_conv > 0 || c->efficiency_attention > 0)
    snprintf(fam, sizeof fam, " (matmul %.0f%%, conv %.0f%%, attention %.0f%%)",
             100 * ts_cluster_efficiency(c, TS_OP_DENSE), 100 * ts_cluster_efficiency(c, TS_OP_CONV2D),
             100 * ts_cluster_efficiency(c, TS_OP_ATTENTION));
  char host[160] = ""; /* a GPU's copies to and from pinned host memory */
  if (c->h2d_bw > 0 || c->d2h_bw > 0)
    snprintf(host, sizeof host, "; host copies %.1f GB/s in, %.1f GB/s out, %.1f us an operator", c->h2d_bw / 1e9,
             c->d2h_bw / 1e9, 1e6 * c->op_overhead);
  fprintf(out, "cluster %s: %d node%s x %d %s; per device %.1f TFLOP/s f32 (%.1f bf16), GEMMs at %.0f%% of the peak%s, "
          "%.0f GB/s memory-bound, %.0f GB memory; links %.1f GB/s + %.1f us inside a node, %.1f GB/s + %.1f us between "
          "nodes%s (%s)\n",
          c->name, c->nodes, c->nodes == 1 ? "" : "s", c->devices_per_node, c->device[0] ? c->device : "devices",
          c->peak_flops_f32 / 1e12, (c->peak_flops_bf16 > 0 ? c->peak_flops_bf16 : c->peak_flops_f32) / 1e12,
          100 * c->gemm_efficiency, fam, c->mem_bandwidth / 1e9, c->mem_bytes / 1e9, c->intra_bw / 1e9, 1e6 * c->intra_latency,
          c->inter_bw / 1e9, 1e6 * c->inter_latency, host, c->source[0] ? c->source : "no source given");
}

double ts_cluster_efficiency(const ts_cluster *c, ts_op op) {
  double e = 0;
  switch (op) {
    case TS_OP_MATMUL: case TS_OP_DENSE: e = c->efficiency_matmul; break;
    case TS_OP_CONV2D: case TS_OP_CONV2D_BWD_DATA: case TS_OP_CONV2D_BWD_WEIGHT: e = c->efficiency_conv; break;
    case TS_OP_ATTENTION: case TS_OP_ATTENTION_BWD: e = c->efficiency_attention; break;
    default: break;
  }
  return e > 0 ? e : c->gemm_efficiency;
}

/* ---- the alpha-beta model ---- */

/* ceil(log2 g) for g >= 1 */
static int log2_up(int g) {
  int r = 0;
  while ((1 << r) < g) r++;
  return r;
}

double ts_cluster_allreduce_flat(const ts_cluster *c, int hosts, int local, double bytes) {
  if (hosts <= 1) return ts_cluster_coll_time(c, TS_COST_ALLREDUCE, hosts * local, 0, bytes);
  if (c->flat_allreduce_bw > 0 && hosts == c->nodes && local == c->devices_per_node)
    return c->flat_allreduce_latency + bytes / c->flat_allreduce_bw;
  double link = c->inter_bw * local;
  return 2.0 * log2_up(local) * (c->intra_latency + bytes / c->intra_bw) +
         log2_up(hosts) * (2.0 * c->inter_latency + (1.0 + local) * bytes / link);
}

double ts_cluster_allreduce_flat_send(const ts_cluster *c, int hosts, int local, double bytes) {
  if (c->flat_allreduce_send_bw > 0 && hosts == c->nodes && local == c->devices_per_node)
    return c->flat_allreduce_send_latency + bytes / c->flat_allreduce_send_bw;
  return HUGE_VAL; /* only measured: which algorithm MPI then runs is its choice */
}

double ts_cluster_allreduce_hier(const ts_cluster *c, int hosts, int local, double bytes) {
  if (c->hier_allreduce_bw > 0 && hosts == c->nodes && local == c->devices_per_node)
    return c->hier_allreduce_latency + bytes / c->hier_allreduce_bw; /* as it runs, measured */
  double bl = c->intra_bcast_bw > 0 ? c->intra_bcast_latency : c->intra_latency;
  double bb = c->intra_bcast_bw > 0 ? c->intra_bcast_bw : c->intra_bw;
  int rl = log2_up(local), rh = log2_up(hosts);
  return 2.0 * rl * (c->intra_latency + bytes / c->intra_bw) + 2.0 * rh * (c->inter_latency + bytes / (c->inter_bw * local)) +
         rl * (bl + bytes / bb);
}

double ts_cluster_reduce_scatter_measured(const ts_cluster *c, int hosts, int local, double bytes, int ring) {
  double lat = ring ? c->reduce_scatter_ring_latency : c->reduce_scatter_latency;
  double bw = ring ? c->reduce_scatter_ring_bw : c->reduce_scatter_bw;
  if (bw > 0 && hosts == c->nodes && local == c->devices_per_node) return lat + bytes / bw;
  return HUGE_VAL; /* only measured: the two run other algorithms than the ring formula's */
}

double ts_cluster_allgather_measured(const ts_cluster *c, int hosts, int local, double bytes, int ring) {
  double lat = ring ? c->allgather_ring_latency : c->allgather_latency;
  double bw = ring ? c->allgather_ring_bw : c->allgather_bw;
  if (bw > 0 && hosts == c->nodes && local == c->devices_per_node) return lat + bytes / bw;
  return HUGE_VAL;
}

int ts_cluster_fit_alpha_beta(const double *bytes, const double *secs, int n, double *latency, double *sec_per_byte) {
  if (n < 2) return ts_error_set(TS_EINVAL, "alpha-beta fit: %d point(s), need 2 or more", n);
  double sw = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    double x = bytes[i], y = secs[i];
    if (!(x > 0) || !(y > 0) || !isfinite(x) || !isfinite(y))
      return ts_error_set(TS_EINVAL, "alpha-beta fit: point %d (%g bytes, %g s) is not positive", i, x, y);
    double w = 1.0 / (y * y);
    sw += w;
    sx += w * x;
    sxx += w * x * x;
    sy += w * y;
    sxy += w * x * y;
  }
  double det = sw * sxx - sx * sx;
  double a = 0, b = 0;
  if (det > 0) {
    a = (sy * sxx - sx * sxy) / det;
    b = (sw * sxy - sx * sy) / det;
  }
  if (!(det > 0) || a < 0) { /* one size only, or the line crosses below 0: through the origin */
    a = 0;
    b = sxy / sxx;
  }
  if (!(b > 0)) return ts_error_set(TS_EINVAL, "alpha-beta fit: the times do not grow with the size (slope %g s/byte)", b);
  *latency = a;
  *sec_per_byte = b;
  return TS_OK;
}

int ts_cluster_spans(const ts_cluster *c, int group, int stride) {
  if (group <= 1) return 0;
  long long extent = (long long)(group - 1) * (stride > 0 ? stride : 1) + 1;
  return extent > c->devices_per_node;
}

double ts_cluster_coll_time(const ts_cluster *c, ts_cost_coll kind, int group, int span, double bytes) {
  if (group < 2 && kind != TS_COST_P2P) return 0;
  double bw = span ? c->inter_bw : c->intra_bw, a = span ? c->inter_latency : c->intra_latency;
  double g = group, f = (g - 1) / g;
  switch (kind) {
    case TS_COST_ALLREDUCE: return 2 * f * bytes / bw + 2 * (g - 1) * a;
    case TS_COST_ALLGATHER:
    case TS_COST_REDUCE_SCATTER:
    case TS_COST_ALLTOALL: return f * bytes / bw + (g - 1) * a;
    case TS_COST_BROADCAST: return bytes / bw + ceil(log2(g)) * a;
    case TS_COST_P2P: return bytes / bw + a;
  }
  return 0;
}
