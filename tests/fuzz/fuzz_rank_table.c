/* libFuzzer target for the rank-table parser of `tessera launch --rank-table`
 * (src/cli/rank_table.c): bytes -> ts__rank_table_parse; on success the host file text must be
 * one "host slots=K" line per server with a clean host name, and the slots must add up to the
 * ranks; on failure the message must be one line. Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/rank_table.h"
#include "tessera/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ts_rank_table t;
  int rc = ts__rank_table_parse("fuzz.json", (const char *)data, size, &t);
  if (rc != TS_OK) {
    const char *m = ts_last_error();
    if (strchr(m, '\n') || strchr(m, '\r')) abort();
    return 0;
  }
  int sum = 0;
  for (int s = 0; s < t.nservers; s++) {
    const char *h = t.servers[s].host;
    if (!*h || strlen(h) > 253) abort();
    for (const char *p = h; *p; p++)
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.'))
        abort();
    if (t.servers[s].first_rank != sum || t.servers[s].slots <= 0) abort();
    sum += t.servers[s].slots;
  }
  if (sum != t.nranks) abort();
  size_t n = ts__rank_table_hostfile(&t, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf) {
    ts__rank_table_hostfile(&t, buf, n + 1);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    if (lines != t.nservers || strlen(buf) != n) abort();
    free(buf);
  }
  ts__rank_table_free(&t);
  return 0;
}
