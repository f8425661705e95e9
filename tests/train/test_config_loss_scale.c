/* The train.loss_scale* keys (src/train/config_schema.c, config_validate.c): auto's resolution
 * (dynamic only with amp_level O1-O3 and amp_dtype f16), "0 = the mode's default" for the value
 * (fixed 1024, dynamic 65536), the refusals naming the key (f16 without a scale, factor <= 1,
 * window < 1, min <= 0, a negative value, a dynamic start below its minimum), one line each; the
 * keys' defaults leave the config hash of existing configs unchanged, and a dumped config with
 * them loads again. */
#include <stdlib.h>
#include <string.h>

#include "tessera/config.h"
#include "test_util.h"

static int load(const char *const *sets, int n, ts_config *c) {
  return ts_config_load_string("train: {steps: 1}\n", "ls.yaml", sets, n, c);
}

static void resolves(const char *const *sets, int n, ts_loss_scale_kind kind, double value) {
  ts_config c;
  int rc = load(sets, n, &c);
  CHECK_MSG(rc == TS_OK, "%s: %s", n ? sets[0] : "(defaults)", ts_last_error());
  if (rc) return;
  ts_loss_scale_config l;
  ts_config_loss_scale(&c, &l);
  CHECK_MSG(l.kind == kind && l.init_scale == value, "%s %s: resolved to %s %g, expected %s %g", n ? sets[0] : "",
            n > 1 ? sets[1] : "", ts_loss_scale_kind_name(l.kind), l.init_scale, ts_loss_scale_kind_name(kind), value);
  CHECK(l.factor == 2 || n > 2);
  ts_loss_scaler s; /* what the config lets through, the scaler takes */
  CHECK_OK(ts_loss_scaler_init(&s, &l));
}

static void refused(const char *const *sets, int n, const char *s1, const char *s2) {
  ts_config c;
  int rc = load(sets, n, &c);
  const char *m = ts_last_error();
  CHECK_MSG(rc == TS_ECONFIG, "%s: expected TS_ECONFIG, got %d (%s)", sets[n - 1], rc, m);
  CHECK_MSG(strstr(m, s1) && (!s2 || strstr(m, s2)), "%s: message '%s' lacks '%s' / '%s'", sets[n - 1], m, s1,
            s2 ? s2 : "");
  CHECK_MSG(!strchr(m, '\n'), "message '%s' is not one line", m);
}

int main(void) {
  /* defaults: auto = none at O0, and the keys' defaults */
  ts_config c;
  CHECK_OK(load(NULL, 0, &c));
  CHECK(c.train.loss_scale == TS_CFG_LOSS_SCALE_AUTO && c.train.loss_scale_value == 0 &&
        c.train.loss_scale_factor == 2 && c.train.loss_scale_window == 2000 && c.train.loss_scale_min == 1);
  resolves(NULL, 0, TS_LOSS_SCALE_NONE, 1);
  const char *o2bf[] = {"train.amp_level=O2"};
  resolves(o2bf, 1, TS_LOSS_SCALE_NONE, 1); /* bf16 has f32's range */
  const char *o1f16[] = {"train.amp_level=O1", "train.amp_dtype=f16"};
  resolves(o1f16, 2, TS_LOSS_SCALE_DYNAMIC, 65536);
  const char *o0f16[] = {"train.amp_level=O0", "train.amp_dtype=f16"};
  resolves(o0f16, 2, TS_LOSS_SCALE_NONE, 1); /* O0 computes in f32 */
  const char *fixed[] = {"train.loss_scale=fixed"};
  resolves(fixed, 1, TS_LOSS_SCALE_FIXED, 1024);
  const char *fixed128[] = {"train.loss_scale=fixed", "train.loss_scale_value=128"};
  resolves(fixed128, 2, TS_LOSS_SCALE_FIXED, 128);
  const char *dyn[] = {"train.loss_scale=dynamic"};
  resolves(dyn, 1, TS_LOSS_SCALE_DYNAMIC, 65536);
  const char *dynlow[] = {"train.loss_scale=dynamic", "train.loss_scale_value=0.5", "train.loss_scale_min=0.125"};
  resolves(dynlow, 3, TS_LOSS_SCALE_DYNAMIC, 0.5); /* a minimum below 1 */
  const char *f16fixed[] = {"train.amp_level=O3", "train.amp_dtype=f16", "train.loss_scale=fixed"};
  resolves(f16fixed, 3, TS_LOSS_SCALE_FIXED, 1024);
  /* refusals naming the key */
  const char *f16none[] = {"train.amp_level=O2", "train.amp_dtype=f16", "train.loss_scale=none"};
  refused(f16none, 3, "train.loss_scale: none is refused with train.amp_level O2 and train.amp_dtype f16",
          "underflows");
  const char *f1[] = {"train.loss_scale=dynamic", "train.loss_scale_factor=1"};
  refused(f1, 2, "train.loss_scale_factor", "out of range");
  const char *f05[] = {"train.loss_scale_factor=0.5"};
  refused(f05, 1, "train.loss_scale_factor", "out of range");
  const char *w0[] = {"train.loss_scale_window=0"};
  refused(w0, 1, "train.loss_scale_window", "out of range");
  const char *m0[] = {"train.loss_scale_min=0"};
  refused(m0, 1, "train.loss_scale_min", "out of range");
  const char *mneg[] = {"train.loss_scale_min=-1"};
  refused(mneg, 1, "train.loss_scale_min", "out of range");
  const char *vneg[] = {"train.loss_scale=fixed", "train.loss_scale_value=-8"};
  refused(vneg, 2, "train.loss_scale_value", "out of range");
  const char *vlow[] = {"train.loss_scale=dynamic", "train.loss_scale_value=0.5"};
  refused(vlow, 2, "train.loss_scale_value (0.5) is below train.loss_scale_min (1)", NULL);
  const char *mhigh[] = {"train.loss_scale=dynamic", "train.loss_scale_min=1e6"};
  refused(mhigh, 2, "train.loss_scale_value (65536, dynamic's default) is below train.loss_scale_min (1e+06)", NULL);
  const char *keepdyn[] = {"train.loss_scale=dynamic", "train.loss_scale_drop_overflow=false"};
  refused(keepdyn, 2, "train.loss_scale_drop_overflow: false applies to train.loss_scale: fixed only", NULL);
  {
    ts_config k;
    ts_loss_scale_config lc;
    const char *keep[] = {"train.loss_scale=fixed", "train.loss_scale_drop_overflow=false"};
    CHECK_OK(load(keep, 2, &k));
    ts_config_loss_scale(&k, &lc);
    CHECK(lc.kind == TS_LOSS_SCALE_FIXED && lc.keep_overflow == 1);
    ts_config_free(&k);
    CHECK_OK(load(fixed, 1, &k));
    ts_config_loss_scale(&k, &lc);
    CHECK(lc.keep_overflow == 0);
    ts_config_free(&k);
  }
  const char *bad[] = {"train.loss_scale=static"};
  refused(bad, 1, "train.loss_scale", "auto, none, fixed, dynamic");
  /* hashes: the defaults change nothing, a scale changes the hash; dump and load again */
  ts_config a, b;
  CHECK_OK(load(NULL, 0, &a));
  const char *autoset[] = {"train.loss_scale=auto", "train.loss_scale_window=2000"};
  CHECK_OK(load(autoset, 2, &b));
  CHECK(ts_config_hash(&a) == ts_config_hash(&b));
  CHECK_OK(load(fixed, 1, &b));
  CHECK(ts_config_hash(&a) != ts_config_hash(&b));
  char *y = NULL;
  CHECK_OK(ts_config_dump_string(&b, &y));
  CHECK(y && strstr(y, "loss_scale: fixed"));
  ts_config d;
  CHECK_OK(ts_config_load_string(y, "dumped.yaml", NULL, 0, &d));
  CHECK(ts_config_hash(&d) == ts_config_hash(&b) && d.train.loss_scale == TS_CFG_LOSS_SCALE_FIXED);
  free(y);
  return ts_test_finish("test_config_loss_scale");
}
