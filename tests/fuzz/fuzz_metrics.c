/* libFuzzer target for the metrics reader of `tessera plot` (src/train/plot.c): the bytes are
 * cut into lines as getline does, each line goes through ts__plot_line (the last one flagged
 * when it has no newline), then the panels are drawn into a canvas (no PNG written). Truncated
 * lines, huge numbers, non-finite values, missing fields and long lines must all give a status
 * or a picture, never a crash or a walk of billions of pixels. Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"
#include "train/plot_impl.h"

static void quiet(ts_log_level level, const char *msg, void *user) { (void)level; (void)msg; (void)user; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned char *px;
  if (!px) {
    px = malloc(3 * (size_t)TS_PLOT_W * TS_PLOT_H);
    ts_log_set_hook(quiet, NULL);
  }
  ts__plot_data d = {0};
  const char *p = (const char *)data, *end = p + size;
  int lineno = 0, rc = TS_OK;
  while (rc == TS_OK && p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    rc = ts__plot_line("fuzz.jsonl", ++lineno, p, len, nl == NULL, &d);
    p += len + (nl != NULL);
  }
  if (rc == TS_OK && px) ts__plot_draw(&d, px);
  ts__plot_data_free(&d);
  return 0;
}
