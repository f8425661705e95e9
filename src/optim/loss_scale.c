/* The loss scaler's state machine (include/tessera/optim.h): PyTorch GradScaler / MindSpore
 * DynamicLossScaleManager semantics. Pure: no graph, no communication; the scale it decides is
 * put into the plans' loss seed by the caller (ts_dist_set_loss_scale). */
#include <float.h>
#include <math.h>
#include <strings.h>

#include "tessera/optim.h"

static const char *k_names[TS_LOSS_SCALE_COUNT] = {"none", "fixed", "dynamic"};

const char *ts_loss_scale_kind_name(ts_loss_scale_kind k) {
  return (unsigned)k < TS_LOSS_SCALE_COUNT ? k_names[k] : "?";
}

int ts_loss_scale_kind_parse(const char *name, ts_loss_scale_kind *out) {
  for (int k = 0; name && k < TS_LOSS_SCALE_COUNT; k++)
    if (!strcasecmp(name, k_names[k])) {
      *out = (ts_loss_scale_kind)k;
      return TS_OK;
    }
  return ts_error_set(TS_ENOTFOUND, "unknown loss scaling '%s' (expected none, fixed or dynamic)",
                      name ? name : "(null)");
}

/* The scale as the f32 seed multiplies it: a finite positive f32. */
static int f32_scale(double v) { return v > 0 && v <= FLT_MAX && (float)v > 0; }

int ts_loss_scaler_init(ts_loss_scaler *s, const ts_loss_scale_config *cfg) {
  if (!s || !cfg) return ts_error_set(TS_EINVAL, "ts_loss_scaler_init: NULL argument");
  const char *kn = ts_loss_scale_kind_name(cfg->kind);
  if ((unsigned)cfg->kind >= TS_LOSS_SCALE_COUNT)
    return ts_error_set(TS_EINVAL, "loss scaler: invalid kind %d", (int)cfg->kind);
  if (cfg->kind != TS_LOSS_SCALE_NONE && !f32_scale(cfg->init_scale))
    return ts_error_set(TS_EINVAL, "loss scaler (%s): init_scale %g must be > 0 and a finite f32", kn,
                        cfg->init_scale);
  if (cfg->kind == TS_LOSS_SCALE_DYNAMIC) {
    if (!(cfg->factor > 1) || !isfinite(cfg->factor))
      return ts_error_set(TS_EINVAL, "loss scaler (dynamic): factor %g must be > 1", cfg->factor);
    if (cfg->window < 1)
      return ts_error_set(TS_EINVAL, "loss scaler (dynamic): window %lld must be >= 1", (long long)cfg->window);
    if (!f32_scale(cfg->min_scale))
      return ts_error_set(TS_EINVAL, "loss scaler (dynamic): min_scale %g must be > 0 and a finite f32",
                          cfg->min_scale);
    if (cfg->min_scale > cfg->init_scale)
      return ts_error_set(TS_EINVAL, "loss scaler (dynamic): init_scale %g is below min_scale %g", cfg->init_scale,
                          cfg->min_scale);
  }
  s->cfg = *cfg;
  s->scale = cfg->kind == TS_LOSS_SCALE_NONE ? 1.0 : cfg->init_scale;
  s->growth = 0;
  return TS_OK;
}

int ts_loss_scaler_update(ts_loss_scaler *s, int overflow) {
  const ts_loss_scale_config *c = &s->cfg;
  if (c->kind == TS_LOSS_SCALE_NONE) return 0;
  if (c->kind == TS_LOSS_SCALE_FIXED) return overflow != 0 && !c->keep_overflow; /* drop_overflow_update */
  if (overflow) {
    double down = s->scale / c->factor;
    s->scale = down > c->min_scale ? down : c->min_scale;
    s->growth = 0;
    return 1;
  }
  if (++s->growth >= c->window) {
    double up = s->scale * c->factor;
    if (f32_scale(up)) s->scale = up; /* as GradScaler: grows only while finite */
    s->growth = 0;
  }
  return 0;
}

int ts_loss_scaler_restore(ts_loss_scaler *s, double scale, int64_t growth) {
  if (s->cfg.kind != TS_LOSS_SCALE_DYNAMIC) return TS_OK;
  if (!f32_scale(scale))
    return ts_error_set(TS_EINVAL, "loss scaler: a recorded scale of %g is not a finite positive f32", scale);
  s->scale = scale > s->cfg.min_scale ? scale : s->cfg.min_scale; /* a lower minimum since */
  s->growth = growth < 0 ? 0 : growth >= s->cfg.window ? s->cfg.window - 1 : growth;
  return TS_OK;
}
