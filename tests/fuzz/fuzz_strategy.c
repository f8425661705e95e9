/* libFuzzer target for the strategy parsers (src/parallel/strategy.c). The bytes go two ways:
 *   - as text (up to the first NUL) -> ts_op_strategy_parse, MindSpore's "((2,1),(1,4))": a
 *     strategy that parses prints (ts_op_strategy_str) as text that parses back to the same
 *     strategy, and is validated against a few device counts and shapes, and recorded in a set;
 *   - as a strategy file (JSON) -> ts_strategy_set_load: a set that loads is read back through
 *     every accessor (each exact op name finds its own strategy, each layout), saved, and loaded
 *     again equal to itself (ts_strategy_set_equal).
 * Invariants: a failure is a negative status with a message, never a crash, a leak or an abort.
 * Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/strategy.h"

static char g_path[128], g_path2[140];

static void check_failure(int rc) {
  if (rc >= 0 || !ts_last_error()[0]) {
    fprintf(stderr, "fuzz_strategy: failure status %d without a message\n", rc);
    abort();
  }
}

static void text(const char *t) {
  ts_op_strategy st, back;
  ts_error_set(TS_OK, "%s", "");
  int rc = ts_op_strategy_parse(t, &st);
  if (rc) {
    check_failure(rc);
    static const ts_op_strategy zero;
    if (memcmp(&st, &zero, sizeof st)) abort(); /* all zero after a failure */
    return;
  }
  char buf[1024];
  ts_op_strategy_str(&st, buf, sizeof buf);
  if (ts_op_strategy_parse(buf, &back) || !ts_op_strategy_equal(&st, &back)) {
    fprintf(stderr, "fuzz_strategy: \"%s\" prints as \"%s\", which does not parse back to it\n", t, buf);
    abort();
  }
  static const int devices[] = {1, 2, 3, 4, 8, 64, 1 << 30};
  for (size_t k = 0; k < sizeof devices / sizeof devices[0]; k++) {
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_op_strategy_validate("op", &st, devices[k]))) check_failure(rc);
  }
  ts_shape shapes[TS_STRATEGY_MAX_INPUTS];
  for (int i = 0; i < st.ninputs; i++) {
    int64_t dims[TS_MAX_DIMS];
    for (int d = 0; d < st.ndim[i]; d++) dims[d] = 64 * (d + 1);
    shapes[i] = ts_shape_make(st.ndim[i], dims);
  }
  ts_error_set(TS_OK, "%s", "");
  if ((rc = ts_op_strategy_check_shapes("op", &st, st.ninputs, shapes))) check_failure(rc);
  ts_strategy_set *s;
  if (ts_strategy_set_create(8, 0, &s)) abort();
  ts_error_set(TS_OK, "%s", "");
  if ((rc = ts_strategy_set_put_text(s, "blocks.*.fc", t))) {
    check_failure(rc);
  } else if (ts_strategy_set_get(s, "blocks.0.fc", &back) || !ts_op_strategy_equal(&st, &back)) {
    abort();
  }
  ts_strategy_set_free(s);
}

static void file(const uint8_t *data, size_t size) {
  FILE *fp = fopen(g_path, "wb");
  if (!fp) abort();
  if (size && fwrite(data, 1, size, fp) != size) abort();
  fclose(fp);
  ts_strategy_set *s = NULL, *s2 = NULL;
  ts_error_set(TS_OK, "%s", "");
  int rc = ts_strategy_set_load(g_path, 0, &s);
  unlink(g_path);
  if (rc) {
    check_failure(rc);
    if (s) abort();
    return;
  }
  for (int i = 0; i < ts_strategy_set_count(s); i++) {
    const char *op = ts_strategy_set_name(s, i);
    const ts_op_strategy *st = ts_strategy_set_at(s, i);
    ts_op_strategy got;
    if (!op || !st || ts_strategy_set_get(s, op, &got)) abort();
    if (!strchr(op, '*') && !ts_op_strategy_equal(st, &got)) abort(); /* a rule may yield to a longer one */
    if (ts_op_strategy_validate(op, st, ts_strategy_set_device_num(s))) abort(); /* checked on load */
  }
  for (int i = 0; i < ts_strategy_set_layout_count(s); i++) {
    const char *p;
    ts_layout l, l2;
    ts_shape sh, sh2;
    if (ts_strategy_set_layout_at(s, i, &p, &l, &sh) || ts_strategy_set_get_layout(s, p, &l2, &sh2)) abort();
    if (!ts_layout_equal(&l, &l2) || !ts_shape_equal(&sh, &sh2)) abort();
  }
  ts_error_set(TS_OK, "%s", "");
  if ((rc = ts_strategy_set_save(s, g_path2))) {
    check_failure(rc);
  } else {
    if ((rc = ts_strategy_set_load(g_path2, ts_strategy_set_device_num(s), &s2))) {
      fprintf(stderr, "fuzz_strategy: a strategy file saved does not load again: %s\n", ts_last_error());
      abort();
    }
    if (!ts_strategy_set_equal(s, s2)) {
      fprintf(stderr, "fuzz_strategy: a strategy file saved and loaded again differs\n");
      abort();
    }
  }
  unlink(g_path2);
  ts_strategy_set_free(s2);
  ts_strategy_set_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/ts_fuzz_strategy_%d.json", base, (int)getpid());
    snprintf(g_path2, sizeof g_path2, "%s.saved.json", g_path);
  }
  char *t = malloc(size + 1);
  if (!t) return 0;
  memcpy(t, data, size);
  t[size] = 0;
  text(t);
  free(t);
  file(data, size);
  return 0;
}
