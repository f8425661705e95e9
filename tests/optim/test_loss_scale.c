/* The loss scaler's state machine (include/tessera/optim.h) against sequences written out by hand
 * from PyTorch GradScaler's update rule (growth_interval = window, backoff = 1/factor) and
 * MindSpore's DynamicLossScaleManager (with its minimum): dynamic with window 3 and factor 2,
 * the minimum clamp (1, and a minimum below 1), growth stopped at the f32 range; fixed skips on
 * overflow and never moves; none never skips; resume; refusals naming the field. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "tessera/optim.h"
#include "test_util.h"

/* Runs `steps` (1 = overflow) from s and checks each step's skip decision, the scale and the
 * growth tracker after it against the expected columns. */
static void run(const char *what, ts_loss_scaler *s, int n, const int *ovf, const int *skip, const double *scale,
                const int64_t *growth) {
  for (int i = 0; i < n; i++) {
    int k = ts_loss_scaler_update(s, ovf[i]);
    CHECK_MSG(k == skip[i] && s->scale == scale[i] && s->growth == growth[i],
              "%s, step %d (overflow %d): skip %d scale %g growth %lld, expected %d %g %lld", what, i + 1, ovf[i], k,
              s->scale, (long long)s->growth, skip[i], scale[i], (long long)growth[i]);
  }
}

static ts_loss_scale_config dyn(double init, double factor, int64_t window, double min) {
  ts_loss_scale_config c = {TS_LOSS_SCALE_DYNAMIC, init, factor, window, min, 0};
  return c;
}

int main(void) {
  ts_loss_scaler s;
  /* dynamic, window 3, factor 2, from 8: grows after 3 clean steps, halves on overflow (the
   * tracker restarts), a clean run after an overflow needs 3 more steps */
  ts_loss_scale_config c = dyn(8, 2, 3, 1);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  CHECK(s.scale == 8 && s.growth == 0);
  {
    const int ovf[] = {0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0};
    const int skip[] = {0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0};
    const double sc[] = {8, 8, 16, 16, 8, 8, 8, 4, 2, 2, 2, 4, 4};
    const int64_t gr[] = {1, 2, 0, 1, 0, 1, 2, 0, 0, 1, 2, 0, 1};
    run("dynamic w3 f2", &s, 13, ovf, skip, sc, gr);
  }
  /* the minimum 1: overflows at 2, 1, 1 stay at 1 (skipped all the same) */
  c = dyn(4, 2, 3, 1);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  {
    const int ovf[] = {1, 1, 1, 1, 0, 0, 0};
    const int skip[] = {1, 1, 1, 1, 0, 0, 0};
    const double sc[] = {2, 1, 1, 1, 1, 1, 2};
    const int64_t gr[] = {0, 0, 0, 0, 1, 2, 0};
    run("dynamic min 1", &s, 7, ovf, skip, sc, gr);
  }
  /* a minimum below 1 (0.25) and a factor that is not 2 (4): 1 -> 0.25 -> 0.25 */
  c = dyn(1, 4, 3, 0.25);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  {
    const int ovf[] = {1, 1, 0, 0, 0, 1};
    const int skip[] = {1, 1, 0, 0, 0, 1};
    const double sc[] = {0.25, 0.25, 0.25, 0.25, 1, 0.25};
    const int64_t gr[] = {0, 0, 1, 2, 0, 0};
    run("dynamic min 0.25 f4", &s, 6, ovf, skip, sc, gr);
  }
  /* a minimum that is not a power of the factor: 3 -> 1.5 -> 0.75 -> clamped at 0.6 */
  c = dyn(3, 2, 3, 0.6);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  {
    const int ovf[] = {1, 1, 1, 1};
    const int skip[] = {1, 1, 1, 1};
    const double sc[] = {1.5, 0.75, 0.6, 0.6};
    const int64_t gr[] = {0, 0, 0, 0};
    run("dynamic min 0.6", &s, 4, ovf, skip, sc, gr);
  }
  /* window 1: every clean step grows; growth stops before the scale leaves f32's range */
  c = dyn(0x1p126, 2, 1, 1);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  {
    const int ovf[] = {0, 0, 0, 1, 0};
    const int skip[] = {0, 0, 0, 1, 0};
    const double sc[] = {0x1p127, 0x1p127, 0x1p127, 0x1p126, 0x1p127};
    const int64_t gr[] = {0, 0, 0, 0, 0};
    run("dynamic at the f32 limit", &s, 5, ovf, skip, sc, gr);
  }
  /* PyTorch's defaults: 65536, 2000 clean steps to double */
  c = dyn(65536, 2, 2000, 1);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  for (int i = 0; i < 1999; i++) CHECK(ts_loss_scaler_update(&s, 0) == 0);
  CHECK(s.scale == 65536 && s.growth == 1999);
  CHECK(ts_loss_scaler_update(&s, 0) == 0 && s.scale == 131072 && s.growth == 0);
  /* fixed: skips on overflow, never moves */
  ts_loss_scale_config f = {TS_LOSS_SCALE_FIXED, 1024, 2, 3, 1, 0};
  CHECK_OK(ts_loss_scaler_init(&s, &f));
  {
    const int ovf[] = {0, 1, 0, 0, 0, 1, 1};
    const int skip[] = {0, 1, 0, 0, 0, 1, 1};
    const double sc[] = {1024, 1024, 1024, 1024, 1024, 1024, 1024};
    const int64_t gr[] = {0, 0, 0, 0, 0, 0, 0};
    run("fixed 1024", &s, 7, ovf, skip, sc, gr);
  }
  /* none: scale 1 whatever init_scale says, nothing skipped */
  ts_loss_scale_config z = {TS_LOSS_SCALE_NONE, 0, 0, 0, 0, 0};
  CHECK_OK(ts_loss_scaler_init(&s, &z));
  {
    const int ovf[] = {1, 0, 1};
    const int skip[] = {0, 0, 0};
    const double sc[] = {1, 1, 1};
    const int64_t gr[] = {0, 0, 0};
    run("none", &s, 3, ovf, skip, sc, gr);
  }
  /* resume: a dynamic scaler continues from the recorded scale and tracker */
  c = dyn(65536, 2, 3, 1);
  CHECK_OK(ts_loss_scaler_init(&s, &c));
  CHECK_OK(ts_loss_scaler_restore(&s, 4096, 2));
  CHECK(s.scale == 4096 && s.growth == 2);
  CHECK(ts_loss_scaler_update(&s, 0) == 0 && s.scale == 8192 && s.growth == 0);
  CHECK_OK(ts_loss_scaler_restore(&s, 0.5, 7)); /* below the minimum, a tracker past the window */
  CHECK(s.scale == 1 && s.growth == 2);
  EXPECT_ERR(ts_loss_scaler_restore(&s, NAN, 0), TS_EINVAL, "recorded scale");
  EXPECT_ERR(ts_loss_scaler_restore(&s, 0, 0), TS_EINVAL, "recorded scale");
  CHECK_OK(ts_loss_scaler_init(&s, &f)); /* fixed keeps its configured scale */
  CHECK_OK(ts_loss_scaler_restore(&s, 8, 1));
  CHECK(s.scale == 1024 && s.growth == 0);
  /* fixed with keep_overflow (drop_overflow_update=False): an overflowed step is applied */
  {
    ts_loss_scale_config k = f;
    k.init_scale = 1024;
    k.keep_overflow = 1;
    CHECK_OK(ts_loss_scaler_init(&s, &k));
    CHECK(ts_loss_scaler_update(&s, 1) == 0 && s.scale == 1024);
    CHECK(ts_loss_scaler_update(&s, 0) == 0 && s.scale == 1024);
    k.keep_overflow = 0; /* the default skips it */
    CHECK_OK(ts_loss_scaler_init(&s, &k));
    CHECK(ts_loss_scaler_update(&s, 1) == 1 && s.scale == 1024);
  }
  /* refusals */
  c = dyn(65536, 1, 3, 1);
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "factor 1", "> 1");
  c = dyn(65536, 2, 0, 1);
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "window 0");
  c = dyn(65536, 2, 3, 0);
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "min_scale 0");
  c = dyn(0.5, 2, 3, 1);
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "init_scale 0.5 is below min_scale 1");
  c = dyn(-1, 2, 3, 1);
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "init_scale -1");
  f.init_scale = 1e39;
  EXPECT_ERR(ts_loss_scaler_init(&s, &f), TS_EINVAL, "fixed", "finite f32");
  c.kind = (ts_loss_scale_kind)7;
  EXPECT_ERR(ts_loss_scaler_init(&s, &c), TS_EINVAL, "invalid kind 7");
  /* names */
  ts_loss_scale_kind k;
  CHECK_OK(ts_loss_scale_kind_parse("Dynamic", &k));
  CHECK(k == TS_LOSS_SCALE_DYNAMIC && !strcmp(ts_loss_scale_kind_name(TS_LOSS_SCALE_FIXED), "fixed"));
  EXPECT_ERR(ts_loss_scale_kind_parse("auto", &k), TS_ENOTFOUND, "none, fixed or dynamic");
  return ts_test_finish("test_loss_scale");
}
