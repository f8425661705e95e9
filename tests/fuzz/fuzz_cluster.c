/* libFuzzer target for the cluster file loader (src/planner/cluster.c, `--cluster FILE`,
 * parallel.cluster, `tessera calibrate`'s cache): bytes -> a file -> ts_cluster_load.
 * Invariants: a failure is a negative status with a one-line message naming the file, never a
 * crash or a leak; a cluster that loads is valid (ts_cluster_validate) and survives its own
 * writer: ts_cluster_save, load again, save again gives the same text (the writer rounds numbers
 * to 6 digits once; after that the file is a fixed point). Built by tests/fuzz/run.sh. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/base.h"
#include "tessera/cluster.h"

static char g_dir[64];

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = malloc(1 << 16);
  *n = b ? fread(b, 1, (1 << 16) - 1, f) : 0;
  fclose(f);
  return b;
}

static void check_failure(int rc, const char *path) {
  const char *m = ts_last_error();
  if (rc >= 0 || !m[0] || strchr(m, '\n') || strchr(m, '\r') || !strstr(m, path)) {
    fprintf(stderr, "fuzz_cluster: failure %d with message '%s'\n", rc, m);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/fuzz_cluster.XXXXXX");
    if (!mkdtemp(g_dir)) abort();
  }
  char in[128], a[128], b[128];
  snprintf(in, sizeof in, "%s/in.yaml", g_dir);
  snprintf(a, sizeof a, "%s/a.yaml", g_dir);
  snprintf(b, sizeof b, "%s/b.yaml", g_dir);
  FILE *f = fopen(in, "wb");
  if (!f) abort();
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  ts_cluster c, c2;
  int rc = ts_cluster_load(in, &c);
  if (rc != TS_OK) {
    check_failure(rc, in);
    return 0;
  }
  if (ts_cluster_validate(&c, "fuzz") != TS_OK) abort();
  if (ts_cluster_save(&c, a) != TS_OK || ts_cluster_load(a, &c2) != TS_OK) {
    fprintf(stderr, "fuzz_cluster: a loaded cluster does not survive save + load: %s\n", ts_last_error());
    abort();
  }
  if (ts_cluster_save(&c2, b) != TS_OK) abort();
  size_t na = 0, nb = 0;
  char *ta = slurp(a, &na), *tb = slurp(b, &nb);
  if (!ta || !tb || na != nb || memcmp(ta, tb, na)) {
    fprintf(stderr, "fuzz_cluster: save(load(save(c))) differs from save(c)\n");
    abort();
  }
  free(ta);
  free(tb);
  return 0;
}
