/* `tessera launch`: runs a tessera command on N ranks through mpirun, the way users of mpirun
 * and Slurm expect; also accepts a MindSpore/HCCL rank table and turns it into a host file. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "../base/rfile.h"
#include "tessera/base.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera launch -n N [--hostfile FILE | --rank-table rank_table.json]\n"
          "                      [--mpirun PATH] [--threads T] [--dry-run] -- COMMAND [ARGS...]\n"
          "Runs `tessera COMMAND ARGS` on N ranks with mpirun (OpenMPI): adds --allow-run-as-root when\n"
          "run as root, --oversubscribe when N exceeds the cores of a single host, exports\n"
          "OMP_NUM_THREADS (T, default 1 per rank). A rank table (MindSpore/HCCL JSON: server_list[].\n"
          "server_id, device[].rank_id) becomes a host file with one slot per device, in rank order.\n"
          "Plain `mpirun -n N tessera train ...` and `srun tessera train ...` work too.\n"
          "example: tessera launch -n 2 -- train examples/mlp_fashion.yaml --set parallel.mode=data_parallel\n");
  return f == stderr ? 2 : 0;
}

/* Parses a rank table into a host file "host slots=K" (servers ordered by their lowest rank).
 * Returns the number of ranks or a negative status. */
int ts__rank_table_to_hostfile(const char *table, const char *hostfile) {
  char *buf = NULL;
  size_t n = 0;
  int rc0 = ts__file_read_all(table, "cannot open", &buf, &n);
  if (rc0) return rc0;
  if (n == 0) {
    free(buf);
    return ts_error_set(TS_EFORMAT, "%s: empty file", table);
  }
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  if (!j) return ts_error_set(TS_EFORMAT, "%s: not valid JSON", table);
  int rc = 0, nranks = 0;
  const cJSON *servers = cJSON_GetObjectItemCaseSensitive(j, "server_list");
  int ns = cJSON_GetArraySize(servers);
  if (!cJSON_IsArray(servers) || ns == 0) {
    cJSON_Delete(j);
    return ts_error_set(TS_EFORMAT, "%s: server_list: expected a non-empty array", table);
  }
  enum { MAXR = 65536 };
  static signed char seen[MAXR];
  memset(seen, 0, sizeof seen);
  typedef struct { const char *host; int slots, minrank; } srv;
  srv *sv = calloc((size_t)ns, sizeof *sv);
  for (int s = 0; s < ns && rc == 0; s++) {
    const cJSON *e = cJSON_GetArrayItem(servers, s);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "server_id");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(e, "device");
    if (!cJSON_IsString(id) || !cJSON_IsArray(dev)) {
      rc = ts_error_set(TS_EFORMAT, "%s: server_list[%d]: needs server_id (string) and device (array)", table, s);
      break;
    }
    sv[s].host = id->valuestring;
    sv[s].minrank = MAXR;
    const cJSON *d;
    cJSON_ArrayForEach(d, dev) {
      const cJSON *rk = cJSON_GetObjectItemCaseSensitive(d, "rank_id");
      long v = cJSON_IsString(rk) ? strtol(rk->valuestring, NULL, 10) : cJSON_IsNumber(rk) ? (long)rk->valuedouble : -1;
      if (v < 0 || v >= MAXR) {
        rc = ts_error_set(TS_EFORMAT, "%s: server %s: device without a valid rank_id", table, sv[s].host);
        break;
      }
      if (seen[v]) {
        rc = ts_error_set(TS_EFORMAT, "%s: rank_id %ld appears twice", table, v);
        break;
      }
      seen[v] = 1;
      sv[s].slots++;
      if (v < sv[s].minrank) sv[s].minrank = (int)v;
      nranks++;
    }
  }
  for (int v = 0; rc == 0 && v < nranks; v++)
    if (!seen[v]) rc = ts_error_set(TS_EFORMAT, "%s: rank_id %d is missing (ranks must be 0..%d)", table, v, nranks - 1);
  if (rc == 0) {
    /* servers in order of their lowest rank */
    for (int a = 0; a < ns; a++)
      for (int b = a + 1; b < ns; b++)
        if (sv[b].minrank < sv[a].minrank) { srv t = sv[a]; sv[a] = sv[b]; sv[b] = t; }
    FILE *o = fopen(hostfile, "w");
    if (!o) rc = ts_error_set(TS_EIO, "%s: cannot write: %s", hostfile, strerror(errno));
    for (int s = 0; rc == 0 && s < ns; s++) fprintf(o, "%s slots=%d\n", sv[s].host, sv[s].slots);
    if (o && fclose(o) != 0 && rc == 0) rc = ts_error_set(TS_EIO, "%s: write failed", hostfile);
  }
  free(sv);
  cJSON_Delete(j);
  return rc ? rc : nranks;
}

int ts_cli_launch(int argc, char **argv) {
  int n = 0, threads = 1, dry = 0, cmd_at = -1;
  const char *hostfile = NULL, *table = NULL, *mpirun = "mpirun";
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--")) { cmd_at = i + 1; break; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--dry-run")) { dry = 1; continue; }
    if (!v) return ts_cli_fail(2, "launch: option %s needs a value", a);
    if (!strcmp(a, "-n") || !strcmp(a, "--np")) n = atoi(v);
    else if (!strcmp(a, "--hostfile")) hostfile = v;
    else if (!strcmp(a, "--rank-table")) table = v;
    else if (!strcmp(a, "--mpirun")) mpirun = v;
    else if (!strcmp(a, "--threads")) threads = atoi(v);
    else return ts_cli_fail(2, "launch: unknown option '%s' (see tessera launch --help)", a);
    i++;
  }
  if (cmd_at < 0 || cmd_at >= argc) return ts_cli_fail(2, "launch: missing '-- COMMAND' (e.g. -- train config.yaml)");
  if (hostfile && table) return ts_cli_fail(2, "launch: --hostfile and --rank-table exclude each other");
  if (threads <= 0) return ts_cli_fail(2, "launch: --threads must be positive");
  static char hf[64];
  if (table) {
    snprintf(hf, sizeof hf, "/tmp/tessera-hosts-%d", (int)getpid());
    int r = ts__rank_table_to_hostfile(table, hf);
    if (r < 0) return ts_cli_fail(r == TS_EFORMAT ? 2 : 1, "launch: %s", ts_last_error());
    if (n == 0) n = r;
    if (n != r) return ts_cli_fail(2, "launch: -n %d but the rank table has %d ranks", n, r);
    hostfile = hf;
  }
  if (n <= 0) return ts_cli_fail(2, "launch: -n N (number of ranks) is required");
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return ts_cli_fail(1, "launch: cannot find the tessera executable");
  self[sl] = 0;
  char nbuf[16], tbuf[32];
  snprintf(nbuf, sizeof nbuf, "%d", n);
  snprintf(tbuf, sizeof tbuf, "OMP_NUM_THREADS=%d", threads);
  const char **av = calloc((size_t)(argc + 24), sizeof *av);
  int k = 0;
  av[k++] = mpirun;
  if (geteuid() == 0) av[k++] = "--allow-run-as-root";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (!hostfile && (long)n * threads > cores) av[k++] = "--oversubscribe";
  if (threads > 1) { av[k++] = "--bind-to"; av[k++] = "none"; }
  av[k++] = "-n"; av[k++] = nbuf;
  if (hostfile) { av[k++] = "--hostfile"; av[k++] = hostfile; }
  av[k++] = "-x"; av[k++] = tbuf;
  av[k++] = "-x"; av[k++] = "OMP_WAIT_POLICY=passive";
  av[k++] = self;
  for (int i = cmd_at; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  if (dry) {
    for (int i = 0; i < k; i++) printf("%s%s", i ? " " : "", av[i]);
    printf("\n");
    free(av);
    return 0;
  }
  fflush(stdout);
  execvp(mpirun, (char *const *)av);
  int e = errno;
  free(av);
  return ts_cli_fail(1, "launch: cannot run %s: %s (install openmpi-bin)", mpirun, strerror(e));
}
