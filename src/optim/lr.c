/* Learning-rate schedules; see include/tessera/optim.h. Computed in double, returned as f32. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "tessera/optim.h"

static const char *k_lr_names[TS_LR_COUNT] = {"constant", "step", "multistep", "cosine", "table"};

const char *ts_lr_kind_name(ts_lr_kind k) { return (unsigned)k < TS_LR_COUNT ? k_lr_names[k] : "?"; }

int ts_lr_kind_parse(const char *name, ts_lr_kind *out) {
  for (int k = 0; name && k < TS_LR_COUNT; k++)
    if (strcasecmp(name, k_lr_names[k]) == 0) {
      *out = (ts_lr_kind)k;
      return TS_OK;
    }
  return ts_error_set(TS_ENOTFOUND, "unknown lr schedule '%s' (expected constant, step, multistep, "
                      "cosine or table)", name ? name : "(null)");
}

int ts_lr_check(const ts_lr_schedule *s) {
  if (!s) return ts_error_set(TS_EINVAL, "lr schedule: NULL");
  const char *kn = ts_lr_kind_name(s->kind);
  if ((unsigned)s->kind >= TS_LR_COUNT)
    return ts_error_set(TS_EINVAL, "lr schedule: invalid kind %d", (int)s->kind);
  if (!(s->base_lr >= 0 && isfinite(s->base_lr)))
    return ts_error_set(TS_EINVAL, "lr schedule (%s): base_lr %g must be >= 0", kn, s->base_lr);
  if (s->warmup_steps < 0)
    return ts_error_set(TS_EINVAL, "lr schedule (%s): warmup_steps %lld must be >= 0", kn,
                        (long long)s->warmup_steps);
  switch (s->kind) {
    case TS_LR_STEP:
      if (s->step_size <= 0)
        return ts_error_set(TS_EINVAL, "lr schedule (step): step_size %lld must be > 0",
                            (long long)s->step_size);
      break;
    case TS_LR_MULTISTEP:
      if (s->nmilestones < 0 || s->nmilestones > TS_LR_MAX_MILESTONES)
        return ts_error_set(TS_EINVAL, "lr schedule (multistep): %d milestones (0..%d allowed)",
                            s->nmilestones, TS_LR_MAX_MILESTONES);
      for (int i = 1; i < s->nmilestones; i++)
        if (s->milestones[i] <= s->milestones[i - 1])
          return ts_error_set(TS_EINVAL, "lr schedule (multistep): milestones must increase "
                              "(milestones[%d] = %lld after %lld)", i,
                              (long long)s->milestones[i], (long long)s->milestones[i - 1]);
      break;
    case TS_LR_COSINE:
      if (s->total_steps < s->warmup_steps)
        return ts_error_set(TS_EINVAL, "lr schedule (cosine): total_steps %lld < warmup_steps "
                            "%lld", (long long)s->total_steps, (long long)s->warmup_steps);
      if (!(s->min_lr >= 0 && s->min_lr <= s->base_lr))
        return ts_error_set(TS_EINVAL, "lr schedule (cosine): min_lr %g must be in [0, base_lr "
                            "%g]", s->min_lr, s->base_lr);
      break;
    case TS_LR_TABLE:
      if (!s->table || s->ntable <= 0)
        return ts_error_set(TS_EINVAL, "lr schedule (table): no rates (%lld)", (long long)s->ntable);
      if (s->warmup_steps)
        return ts_error_set(TS_EINVAL, "lr schedule (table): warmup_steps %lld: a table gives every step's "
                            "rate, warm-up included (warmup_steps must be 0)", (long long)s->warmup_steps);
      for (int64_t i = 0; i < s->ntable; i++)
        if (!(s->table[i] >= 0 && isfinite(s->table[i])))
          return ts_error_set(TS_EINVAL, "lr schedule (table): rate [%lld] = %g must be finite and >= 0",
                              (long long)i, (double)s->table[i]);
      break;
    default: break;
  }
  if ((s->kind == TS_LR_STEP || s->kind == TS_LR_MULTISTEP) && !(s->gamma >= 0))
    return ts_error_set(TS_EINVAL, "lr schedule (%s): gamma %g must be >= 0", kn, s->gamma);
  return TS_OK;
}

float ts_lr_at(const ts_lr_schedule *s, int64_t step) {
  if (!s) return 0.0f;
  if (step < 0) step = 0;
  if (s->kind == TS_LR_TABLE) return s->ntable > 0 && s->table ? s->table[step < s->ntable ? step : s->ntable - 1] : 0.0f;
  double base = s->base_lr;
  if (step < s->warmup_steps) return (float)(base * (double)step / (double)s->warmup_steps);
  switch (s->kind) {
    case TS_LR_STEP:
      return (float)(base * pow(s->gamma, (double)(step / (s->step_size > 0 ? s->step_size : 1))));
    case TS_LR_MULTISTEP: {
      int k = 0;
      for (int i = 0; i < s->nmilestones && i < TS_LR_MAX_MILESTONES; i++) k += s->milestones[i] <= step;
      return (float)(base * pow(s->gamma, (double)k));
    }
    case TS_LR_COSINE: {
      double span = (double)(s->total_steps - s->warmup_steps);
      double prog = (double)(step - s->warmup_steps) / (span > 1 ? span : 1);
      if (prog > 1) prog = 1;
      return (float)(s->min_lr + (base - s->min_lr) * 0.5 * (1.0 + cos(M_PI * prog)));
    }
    default: return (float)base;
  }
}
