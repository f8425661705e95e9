/* Hostile strategy files and strings (src/parallel/strategy.c) that tests/fuzz/fuzz_strategy.c
 * found mishandled, each now refused cleanly (the inputs are also in tests/fuzz/corpus/strategy/).
 *  - a number beyond int64 where an integer is expected: the double was converted before its range
 *    was checked (undefined behaviour that gcc's -fsanitize=undefined does not check, clang's does:
 *    the ctest fuzz_strategy replays the input). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/strategy.h"
#include "test_util.h"

static char g_path[256];

/* Writes text as a strategy file and loads it: the status, *s the set (or NULL). */
static int load(const char *text, ts_strategy_set **s) {
  FILE *f = fopen(g_path, "w");
  if (!f) return TS_EIO;
  fputs(text, f);
  fclose(f);
  *s = NULL;
  return ts_strategy_set_load(g_path, 0, s);
}

int main(void) {
  snprintf(g_path, sizeof g_path, "/tmp/ts_strategy_inputs_%d.json", (int)getpid());
  ts_strategy_set *s = NULL;
  int rc;

  /* integers beyond int64, and infinity (1e999) */
  static const char *const big[] = {
      "{\"version\": 1, \"device_num\": 8, \"stage\": 0, \"strategies\": {\"fc\": {\"inputs\": [[2.2e32, 1]]}}}",
      "{\"version\": 1e300, \"device_num\": 8, \"stage\": 0, \"strategies\": {}}",
      "{\"version\": 1, \"device_num\": -1e999, \"stage\": 0, \"strategies\": {}}",
      "{\"version\": 1, \"device_num\": 8, \"stage\": 0, \"strategies\": {}, \"layouts\": {\"w\": {\"dev_matrix\": [8],"
      " \"tensor_map\": [0], \"shape\": [1e999]}}}",
  };
  static const char *const key[] = {"strategies.fc.inputs[0][0]: expected a positive integer, got 2.2",
                                    "version: expected an integer, got 1.0000000000000001e+300",
                                    "device_num: expected a positive integer, got -inf",
                                    "layouts.w.shape[0]: expected a non-negative integer, got inf"};
  for (int i = 0; i < 4; i++) {
    rc = load(big[i], &s);
    CHECK_MSG(rc == TS_EFORMAT && !s && strstr(ts_last_error(), key[i]), "%d: %d %s", i, rc, ts_last_error());
    ts_strategy_set_free(s);
  }

  unlink(g_path);
  return ts_test_finish("test_strategy_inputs");
}
