/* `tessera calibrate [CONFIG [--set k=v] [--steps N]] [-o FILE]`: measures this machine
 * (ts_calibrate; with a config also the model's operator families, ts_calibrate_model) and
 * writes the cluster description to FILE and to the cache the built-in cluster "local" reads.
 * Run it under mpirun -n 2 to measure the links between ranks too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "tessera/comm.h"
#include "tessera/train.h"

static void cache_path(char *buf, size_t cap, char *dir, size_t dcap) {
  const char *e = getenv("TESSERA_CLUSTER_CACHE"), *h = getenv("HOME");
  if (e && *e) {
    snprintf(buf, cap, "%s", e);
    dir[0] = 0;
    return;
  }
  const char *x = getenv("XDG_CACHE_HOME"); /* as src/planner/cluster.c reads it */
  if (x && x[0] == '/') snprintf(dir, dcap, "%s/tessera", x);
  else snprintf(dir, dcap, "%s/.cache/tessera", h && *h ? h : "/tmp");
  if (snprintf(buf, cap, "%s/cluster-local.yaml", dir) >= (int)cap) buf[0] = 0; /* too long: no default */
}

int ts_cli_calibrate(int argc, char **argv) {
  const char *out = NULL, *device = NULL;
  int steps = 5;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return ts_cli_fail(1, "calibrate: out of memory");
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      free(rest);
      printf("usage: tessera calibrate [CONFIG.yaml [--set key=value ...] [--steps N]] [--device CPU|GPU] [-o cluster.yaml]\n"
             "Measures this machine for the cost model (docs/auto-parallel.md): the sgemm and bf16 GEMM peaks, the\n"
             "share of the peak a model-sized GEMM reaches, the memory bandwidth and, under mpirun -n 2 or more, the\n"
             "all-reduce latency and bandwidth between the ranks. With CONFIG, also the model's own operators as one\n"
             "process runs them (2 warm-up + N timed training steps, default 5; its data set is read): the achieved\n"
             "share of the peak per family (efficiency_matmul, efficiency_conv, efficiency_attention) and the\n"
             "bandwidth of the rest, and the cost model's price of the measured step beside it. Writes the cluster\n"
             "description to FILE (if given) and to the cache the built-in cluster 'local' reads\n"
             "($TESSERA_CLUSTER_CACHE, else $XDG_CACHE_HOME or ~/.cache, then tessera/cluster-local.yaml).\n"
             "--device GPU (or CONFIG's device_target: GPU) measures one GPU per rank instead (docs/gpu.md): its f32\n"
             "and bf16 GEMM peaks, a kernel launch's cost, the host<->device copy rates and the links through the\n"
             "device collectives (NCCL or MPI staged), then the model's operators on the GPU (CUDA events).\n"
             "examples: mpirun -n 2 tessera calibrate -o local.yaml\n"
             "          tessera calibrate examples/gpt_text.yaml --set data.path=input.txt -o local.yaml\n"
             "          tessera calibrate examples/mlp_fashion.yaml --set device_target=GPU -o h200.yaml\n");
      return 0;
    }
    if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--steps") || !strcmp(argv[i], "--device")) && i + 1 >= argc) {
      free(rest);
      return ts_cli_fail(2, "calibrate: %s needs a value (see tessera calibrate --help)", argv[i]);
    }
    if (!strcmp(argv[i], "-o")) out = argv[++i];
    else if (!strcmp(argv[i], "--device")) {
      device = argv[++i];
      if (strcasecmp(device, "CPU") && strcasecmp(device, "GPU")) {
        free(rest);
        return ts_cli_fail(2, "calibrate: --device %s: CPU or GPU", device);
      }
    }
    else if (!strcmp(argv[i], "--steps")) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 100000) {
        free(rest);
        return ts_cli_fail(2, "calibrate: --steps needs a whole number from 1, got '%s'", argv[i]);
      }
      steps = (int)v;
    } else rest[nrest++] = argv[i];
  }
  TS_CLI_CONFIG(cfg);
  int have_cfg = nrest > 0;
  if (have_cfg) {
    int e = ts_cli_load_config("calibrate", nrest, rest, &cfg, NULL, NULL);
    if (e) {
      free(rest);
      return e;
    }
  }
  free(rest);
  int rc = ts_comm_init(NULL, NULL);
  ts_comm *w = NULL;
  if (!rc) rc = ts_comm_world(&w);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  int rank = ts_comm_rank(w);
  ts_cluster c;
  if (device) cfg.device_target = strcasecmp(device, "GPU") ? TS_CFG_DEVICE_CPU : TS_CFG_DEVICE_GPU;
  if (cfg.device_target == TS_CFG_DEVICE_GPU)
    rc = ts_calibrate_gpu(ts_comm_size(w) > 1 ? w : NULL, cfg.device_id, &c);
  else rc = ts_calibrate(ts_comm_size(w) > 1 ? w : NULL, &c);
  ts_calibration_report rep;
  if (!rc && have_cfg) rc = ts_calibrate_model(&cfg, 2, steps, &c, &rep);
  if (!rc && rank == 0 && have_cfg) {
    static const char *fam[] = {"matmul/dense", "convolution", "attention"};
    const double *eff[] = {&c.efficiency_matmul, &c.efficiency_conv, &c.efficiency_attention};
    printf("the model's operators, per step (%d timed steps):\n", rep.steps);
    for (int f = 0; f < 3; f++)
      if (rep.family_s[f] > 0)
        printf("  %-13s %9.3f ms  %8.1f GFLOP/s  %5.1f%% of the peak\n", fam[f], 1e3 * rep.family_s[f],
               rep.family_flops[f] / rep.family_s[f] / 1e9, 100 * *eff[f]);
    printf("  %-13s %9.3f ms  %8.2f GB/s over %lld operators (%.1f us each beyond their bytes)\n", "other",
           1e3 * rep.other_s, rep.other_s > 0 ? rep.other_bytes / rep.other_s / 1e9 : 0, (long long)rep.other_nodes,
           1e6 * c.op_overhead);
    printf("  the plan ran %.3f ms; the cost model prices it %.3f ms with these numbers (%.2fx)\n", 1e3 * rep.plan_s,
           1e3 * rep.predicted_s, rep.plan_s > 0 ? rep.predicted_s / rep.plan_s : 0);
  }
  if (!rc && rank == 0) {
    char path[512], dir[512];
    cache_path(path, sizeof path, dir, sizeof dir);
    if (dir[0]) { /* ~/.cache/tessera */
      char parent[512];
      snprintf(parent, sizeof parent, "%s", dir);
      char *sl = strrchr(parent, '/');
      if (sl) {
        *sl = 0;
        mkdir(parent, 0755);
      }
      mkdir(dir, 0755);
    }
    rc = path[0] ? ts_cluster_save(&c, path)
                 : ts_error_set(TS_ECONFIG, "calibrate: the cache path %s/cluster-local.yaml is too long", dir);
    if (!rc && out) rc = ts_cluster_save(&c, out);
    if (!rc) {
      ts_cluster_describe(&c, stdout);
      printf("written: %s%s%s\n", path, out ? ", " : "", out ? out : "");
    }
  }
  ts_comm_finalize();
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  return 0;
}
