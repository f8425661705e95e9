/* Metrics lines that tests/fuzz/fuzz_metrics.c found mishandled by the reader of `tessera plot`
 * (src/train/plot.c), each now read cleanly (the inputs are also in tests/fuzz/corpus/metrics/).
 * Run under the Asan build, the overflow itself fails:
 *  - a line of a metrics file from before cJSON with several bare nan / inf values: each became
 *    "null", one byte longer, in a buffer of the line's length plus one (heap overflow). */
#include <string.h>

#include "tessera/base.h"
#include "train/plot_impl.h"
#include "test_util.h"

static void quiet(ts_log_level level, const char *msg, void *user) { (void)level; (void)msg; (void)user; }

int main(void) {
  ts_log_set_hook(quiet, NULL);
  ts__plot_data d;
  memset(&d, 0, sizeof d);
  static const char *const lines[] = {
      "{\"type\":\"eval\",\"step\":1,\"loss\":nan,\"top1\":inf,\"a\":nan,\"b\":-inf,\"c\":+nan,\"d\":nan,\"e\":inf}",
      ":nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan:nan",
      "{\"type\":\"train\",\"step\":2,\"loss\":0.5}",
      "{\"type\":\"eval\",\"step\":3,\"loss\":nan,\"top1\":0.5}",
  };
  int expect[] = {TS_OK, TS_EFORMAT, TS_OK, TS_OK};
  for (int i = 0; i < 4; i++) {
    int rc = ts__plot_line("m.jsonl", i + 1, lines[i], strlen(lines[i]), 0, &d);
    CHECK_MSG(rc == expect[i], "line %d: %d %s", i + 1, rc, ts_last_error());
  }
  CHECK(d.tl.n == 1 && d.tl.y[0] == 0.5);
  CHECK(d.ea.n == 1 && d.ea.y[0] == 0.5); /* the nan loss reads as null: no point */
  ts__plot_data_free(&d);
  return ts_test_finish("test_plot_inputs");
}
