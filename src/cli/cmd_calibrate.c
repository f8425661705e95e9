/* `tessera calibrate [-o FILE]`: measures this machine (ts_calibrate) and writes the cluster
 * description to FILE and to the cache the built-in cluster "local" reads. Run it under mpirun
 * -n 2 to measure the links between ranks too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  snprintf(dir, dcap, "%s/.cache/tessera", h && *h ? h : "/tmp");
  snprintf(buf, cap, "%s/cluster-local.yaml", dir);
}

int ts_cli_calibrate(int argc, char **argv) {
  const char *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tessera calibrate [-o cluster.yaml]\n"
             "Measures this machine for the cost model (docs/auto-parallel.md): the sgemm peak, the share of it\n"
             "a model-sized GEMM reaches, the memory bandwidth and, under mpirun -n 2 or more, the all-reduce\n"
             "latency and bandwidth between the ranks. Writes the cluster description to FILE (if given) and to\n"
             "the cache the built-in cluster 'local' reads ($TESSERA_CLUSTER_CACHE, else\n"
             "~/.cache/tessera/cluster-local.yaml). example: mpirun -n 2 tessera calibrate -o local.yaml\n");
      return 0;
    }
    if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else return ts_cli_fail(2, "calibrate: unknown argument '%s' (see tessera calibrate --help)", argv[i]);
  }
  int rc = ts_comm_init(NULL, NULL);
  ts_comm *w = NULL;
  if (!rc) rc = ts_comm_world(&w);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  int rank = ts_comm_rank(w);
  ts_cluster c;
  rc = ts_calibrate(ts_comm_size(w) > 1 ? w : NULL, &c);
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
    rc = ts_cluster_save(&c, path);
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
