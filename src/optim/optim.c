/* Optimizers on flat f32 buffers with a segment table; see include/tessera/optim.h.
 *
 * The element-wise expressions follow PyTorch 1.13's single-tensor kernels operation by
 * operation (same order of f32 roundings, coefficients computed in double and rounded to f32
 * where ATen receives a Python float), so results agree with torch.optim to a few ulps. */
/* Note: the Adam/LAMB loops vectorise only with -fno-math-errno (sqrtf's errno path is a
 * branch); the pragma/attribute forms of that option have no effect in GCC 12. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "optim_mixed.h"
#include "tessera/optim.h"
#include "tessera/tensor.h"

#define OPT_PAR_MIN 32768 /* elements below which a loop runs on one thread */
#define OPT_BLOCK 4096    /* block of the deterministic reductions */

struct ts_optim {
  ts_optim_config cfg;
  int nseg;
  ts_optim_segment *seg; /* names owned */
  size_t extent;
  int nslots;
  float *slot[2];
  int64_t step;
  int nviews;
  char **view_name; /* [0] = "step", then slot-major */
  double *part;     /* LAMB: per-block partial sums (2 per block of the largest segment) */
  double *sums;     /* LAMB: 2 per segment */
  ts_optim_reduce_fn reduce;
  void *reduce_user;
  float *mix;       /* ts__optim_step_mixed: OPT_MIX_CHUNK floats, the gradients widened chunk by chunk */
};

static const char *k_kind_names[TS_OPTIM_COUNT] = {"sgd", "momentum", "adam", "adamw", "lamb"};

const char *ts_optim_kind_name(ts_optim_kind k) {
  return (unsigned)k < TS_OPTIM_COUNT ? k_kind_names[k] : "?";
}

int ts_optim_kind_parse(const char *name, ts_optim_kind *out) {
  for (int k = 0; name && k < TS_OPTIM_COUNT; k++)
    if (strcasecmp(name, k_kind_names[k]) == 0) {
      *out = (ts_optim_kind)k;
      return TS_OK;
    }
  return ts_error_set(TS_ENOTFOUND, "unknown optimizer '%s' (expected sgd, momentum, adam, adamw "
                      "or lamb)", name ? name : "(null)");
}

ts_optim_config ts_optim_config_default(ts_optim_kind kind) {
  ts_optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.eps = 1e-8;
  switch (kind) {
    case TS_OPTIM_MOMENTUM: c.momentum = 0.9; break;
    case TS_OPTIM_ADAMW: c.weight_decay = 1e-2; break;
    case TS_OPTIM_LAMB: c.weight_decay = 1e-2; c.eps = 1e-6; break;
    default: break;
  }
  return c;
}

static const char *slot_name(ts_optim_kind k, int s) {
  if (k == TS_OPTIM_MOMENTUM) return s == 0 ? "momentum_buffer" : NULL;
  if (k == TS_OPTIM_ADAM || k == TS_OPTIM_ADAMW || k == TS_OPTIM_LAMB)
    return s == 0 ? "exp_avg" : s == 1 ? "exp_avg_sq" : NULL;
  return NULL;
}

static int check_config(const ts_optim_config *c) {
  const char *kn = ts_optim_kind_name(c->kind);
  if ((unsigned)c->kind >= TS_OPTIM_COUNT)
    return ts_error_set(TS_EINVAL, "optimizer config: invalid kind %d", (int)c->kind);
  if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
    return ts_error_set(TS_EINVAL, "optimizer config (%s): weight_decay %g must be >= 0", kn,
                        c->weight_decay);
  if (c->ngroups < 0 || c->ngroups > TS_OPTIM_MAX_GROUPS || (c->ngroups > 0 && !c->groups))
    return ts_error_set(TS_EINVAL, "optimizer config (%s): %d parameter groups%s", kn, c->ngroups,
                        c->ngroups > 0 ? " and no table" : "");
  for (int k = 0; k < c->ngroups; k++)
    if (!(c->groups[k].lr_scale >= 0 && isfinite(c->groups[k].lr_scale) && c->groups[k].weight_decay >= 0 &&
          isfinite(c->groups[k].weight_decay)))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): parameter group %d: lr_scale %g and weight_decay %g "
                          "must be finite and >= 0", kn, k + 1, c->groups[k].lr_scale, c->groups[k].weight_decay);
  if (c->kind == TS_OPTIM_MOMENTUM) {
    if (!(c->momentum >= 0 && isfinite(c->momentum)))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): momentum %g must be >= 0", kn,
                          c->momentum);
    if (!(c->dampening >= 0 && c->dampening <= 1))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): dampening %g must be in [0, 1]", kn,
                          c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): nesterov needs momentum > 0 and "
                          "dampening 0 (momentum %g, dampening %g)", kn, c->momentum,
                          c->dampening);
  }
  if (c->kind >= TS_OPTIM_ADAM) {
    if (!(c->beta1 >= 0 && c->beta1 < 1))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): beta1 %g must be in [0, 1)", kn,
                          c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): beta2 %g must be in [0, 1)", kn,
                          c->beta2);
    if (!(c->eps >= 0 && isfinite(c->eps)))
      return ts_error_set(TS_EINVAL, "optimizer config (%s): eps %g must be >= 0", kn, c->eps);
  }
  return TS_OK;
}

/* segment sg's group (NULL: the default one) */
static const ts_optim_group *seg_group(const ts_optim_config *cfg, const ts_optim_segment *sg) {
  int k = sg ? TS_SEG_GROUP_OF(sg->flags) : 0;
  return cfg && k > 0 && k <= cfg->ngroups && cfg->groups ? &cfg->groups[k - 1] : NULL;
}

float ts_optim_segment_lr(const ts_optim_config *cfg, const ts_optim_segment *sg, float lr) {
  const ts_optim_group *gr = seg_group(cfg, sg);
  return gr ? (float)((double)lr * gr->lr_scale) : lr;
}

double ts_optim_segment_wd(const ts_optim_config *cfg, const ts_optim_segment *sg) {
  if (!cfg || (sg && (sg->flags & TS_SEG_NO_DECAY))) return 0.0;
  const ts_optim_group *gr = seg_group(cfg, sg);
  return gr ? gr->weight_decay : cfg->weight_decay;
}

static int cmp_seg_offset(const void *a, const void *b) {
  const ts_optim_segment *x = *(const ts_optim_segment *const *)a;
  const ts_optim_segment *y = *(const ts_optim_segment *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}
static int cmp_seg_name(const void *a, const void *b) {
  return strcmp((*(const ts_optim_segment *const *)a)->name,
                (*(const ts_optim_segment *const *)b)->name);
}

/* Unique non-empty names; ranges that do not overlap. */
static int check_segments(const ts_optim_segment *segs, int nseg, int ngroups) {
  if (nseg < 0 || (nseg > 0 && !segs))
    return ts_error_set(TS_EINVAL, "ts_optim_create: bad segment table (%d segments)", nseg);
  for (int i = 0; i < nseg; i++) {
    if (!segs[i].name || !segs[i].name[0])
      return ts_error_set(TS_EINVAL, "ts_optim_create: segment %d has no name", i);
    if (segs[i].offset + segs[i].numel < segs[i].offset)
      return ts_error_set(TS_EINVAL, "ts_optim_create: segment '%s': offset + numel overflows",
                          segs[i].name);
    if (TS_SEG_GROUP_OF(segs[i].flags) > ngroups)
      return ts_error_set(TS_EINVAL, "ts_optim_create: segment '%s' is in parameter group %d of %d", segs[i].name,
                          TS_SEG_GROUP_OF(segs[i].flags), ngroups);
  }
  const ts_optim_segment **v = malloc(((size_t)nseg + 1) * sizeof *v);
  if (!v) return ts_error_set(TS_ENOMEM, "ts_optim_create: out of memory");
  int rc = TS_OK;
  for (int i = 0; i < nseg; i++) v[i] = &segs[i];
  qsort(v, (size_t)nseg, sizeof *v, cmp_seg_name);
  for (int i = 1; i < nseg && !rc; i++)
    if (strcmp(v[i - 1]->name, v[i]->name) == 0)
      rc = ts_error_set(TS_EINVAL, "ts_optim_create: segment name '%s' appears twice", v[i]->name);
  if (!rc) {
    qsort(v, (size_t)nseg, sizeof *v, cmp_seg_offset);
    size_t end = 0;
    const ts_optim_segment *prev = NULL;
    for (int i = 0; i < nseg && !rc; i++) {
      if (v[i]->numel == 0) continue;
      if (prev && v[i]->offset < end)
        rc = ts_error_set(TS_EINVAL, "ts_optim_create: segments '%s' [%zu, %zu) and '%s' "
                          "[%zu, %zu) overlap", prev->name, prev->offset,
                          prev->offset + prev->numel, v[i]->name, v[i]->offset,
                          v[i]->offset + v[i]->numel);
      if (v[i]->offset + v[i]->numel > end) {
        end = v[i]->offset + v[i]->numel;
        prev = v[i];
      }
    }
  }
  free(v);
  return rc;
}

static char *dup_join(const char *a, const char *b) {
  size_t la = strlen(a), lb = b ? strlen(b) : 0;
  char *s = malloc(la + lb + 2);
  if (!s) return NULL;
  memcpy(s, a, la);
  if (b) {
    s[la] = '.';
    memcpy(s + la + 1, b, lb);
    s[la + 1 + lb] = 0;
  } else {
    s[la] = 0;
  }
  return s;
}

void ts_optim_free(ts_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->nseg; i++) free((char *)o->seg[i].name);
  for (int i = 0; i < o->nviews; i++) free(o->view_name[i]);
  free(o->view_name);
  free(o->seg);
  free((void *)o->cfg.groups);
  for (int k = 0; k < 2; k++) ts_free(o->slot[k]);
  free(o->part);
  free(o->sums);
  ts_free(o->mix);
  free(o);
}

int ts_optim_create(ts_optim **out, const ts_optim_config *cfg, const ts_optim_segment *segs,
                    int nseg) {
  if (!out || !cfg) return ts_error_set(TS_EINVAL, "ts_optim_create: NULL argument");
  *out = NULL;
  int rc = check_config(cfg);
  if (rc) return rc;
  if ((rc = check_segments(segs, nseg, cfg->ngroups))) return rc;
  ts_optim *o = calloc(1, sizeof *o);
  if (!o) return ts_error_set(TS_ENOMEM, "ts_optim_create: out of memory");
  o->cfg = *cfg;
  o->cfg.groups = NULL;
  if (cfg->ngroups > 0) { /* owned: the caller's table may go */
    ts_optim_group *gc = malloc(sizeof *gc * (size_t)cfg->ngroups);
    if (!gc) goto oom;
    memcpy(gc, cfg->groups, sizeof *gc * (size_t)cfg->ngroups);
    o->cfg.groups = gc;
  }
  o->seg = calloc((size_t)nseg + 1, sizeof *o->seg);
  if (!o->seg) goto oom;
  size_t maxn = 0;
  for (int i = 0; i < nseg; i++) {
    o->seg[i] = segs[i];
    if (!(o->seg[i].name = dup_join(segs[i].name, NULL))) goto oom;
    o->nseg++;
    if (segs[i].offset + segs[i].numel > o->extent) o->extent = segs[i].offset + segs[i].numel;
    if (segs[i].numel > maxn) maxn = segs[i].numel;
  }
  while (slot_name(cfg->kind, o->nslots)) o->nslots++;
  for (int k = 0; k < o->nslots; k++)
    if (!(o->slot[k] = ts_calloc((o->extent ? o->extent : 1) * sizeof(float)))) goto oom;
  o->view_name = calloc((size_t)(1 + o->nslots * nseg), sizeof *o->view_name);
  if (!o->view_name) goto oom;
  if (!(o->view_name[o->nviews] = dup_join("step", NULL))) goto oom;
  o->nviews++;
  for (int k = 0; k < o->nslots; k++)
    for (int i = 0; i < nseg; i++) {
      if (!(o->view_name[o->nviews] = dup_join(slot_name(cfg->kind, k), segs[i].name))) goto oom;
      o->nviews++;
    }
  if (cfg->kind == TS_OPTIM_LAMB) {
    size_t nb = (maxn + OPT_BLOCK - 1) / OPT_BLOCK;
    o->part = malloc((2 * nb + 2) * sizeof(double));
    o->sums = malloc((2 * (size_t)nseg + 2) * sizeof(double));
    if (!o->part || !o->sums) goto oom;
  }
  *out = o;
  return TS_OK;
oom:
  ts_optim_free(o);
  return ts_error_set(TS_ENOMEM, "ts_optim_create: out of memory (%d segments)", nseg);
}

const ts_optim_config *ts_optim_get_config(const ts_optim *o) { return o ? &o->cfg : NULL; }
size_t ts_optim_extent(const ts_optim *o) { return o ? o->extent : 0; }
int64_t ts_optim_get_step(const ts_optim *o) { return o ? o->step : 0; }
void ts_optim_set_step(ts_optim *o, int64_t step) {
  if (o) o->step = step;
}
void ts_optim_reset(ts_optim *o) {
  if (!o) return;
  o->step = 0;
  for (int k = 0; k < o->nslots; k++) memset(o->slot[k], 0, o->extent * sizeof(float));
}
void ts_optim_set_norm_reduce(ts_optim *o, ts_optim_reduce_fn fn, void *user) {
  if (!o) return;
  o->reduce = fn;
  o->reduce_user = user;
}

int ts__optim_reduce_norms(ts_optim *o, double *sums, int n, int *none) {
  *none = !o || !o->reduce;
  return *none || !sums ? TS_OK : o->reduce(sums, n, o->reduce_user);
}

int ts_optim_num_slots(const ts_optim *o) { return o ? o->nslots : 0; }
int ts_optim_kind_num_slots(ts_optim_kind k) {
  int n = 0;
  while (slot_name(k, n)) n++;
  return n;
}
const char *ts_optim_kind_slot_name(ts_optim_kind k, int slot) { return slot >= 0 ? slot_name(k, slot) : NULL; }
const char *ts_optim_slot_name(const ts_optim *o, int k) {
  return (o && k >= 0 && k < o->nslots) ? slot_name(o->cfg.kind, k) : NULL;
}
float *ts_optim_slot_data(ts_optim *o, int k) {
  return (o && k >= 0 && k < o->nslots) ? o->slot[k] : NULL;
}
int ts_optim_state_count(const ts_optim *o) { return o ? o->nviews : 0; }
const char *ts_optim_state_name(const ts_optim *o, int i) {
  return (o && i >= 0 && i < o->nviews) ? o->view_name[i] : NULL;
}

int ts_optim_state_view(ts_optim *o, int i, ts_tensor *view) {
  if (!o || !view) return ts_error_set(TS_EINVAL, "ts_optim_state_view: NULL argument");
  if (i < 0 || i >= o->nviews)
    return ts_error_set(TS_ENOTFOUND, "ts_optim_state_view: index %d out of range (%d views)", i,
                        o->nviews);
  if (i == 0) {
    ts_tensor_view(view, TS_I64, ts_shape_make(0, NULL), &o->step);
    return TS_OK;
  }
  int k = (i - 1) / o->nseg, s = (i - 1) % o->nseg;
  ts_tensor_view(view, TS_F32, ts_shape1((int64_t)o->seg[s].numel),
                 o->slot[k] + o->seg[s].offset);
  return TS_OK;
}

int ts_optim_state_find(ts_optim *o, const char *name, ts_tensor *view) {
  if (!o || !name) return ts_error_set(TS_EINVAL, "ts_optim_state_find: NULL argument");
  for (int i = 0; i < o->nviews; i++)
    if (strcmp(o->view_name[i], name) == 0) return ts_optim_state_view(o, i, view);
  return ts_error_set(TS_ENOTFOUND, "optimizer (%s) has no state named '%s'",
                      ts_optim_kind_name(o->cfg.kind), name);
}

/* ------------------------------------------------------------------ kernels
 * Each takes one segment's slices. Comments give the PyTorch 1.13 statements mirrored. */

/* d_p = grad.add(param, alpha=wd); param.add_(d_p, alpha=-lr) */
static void k_sgd(float *restrict p, const float *restrict g, size_t n, float lr, float wd) {
#pragma omp parallel for simd if (n >= OPT_PAR_MIN) schedule(static)
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    p[i] = p[i] + (-lr) * d;
  }
}

/* buf = clone(d_p) on the first step, else buf.mul_(mu).add_(d_p, alpha=1-dampening);
 * d_p = d_p.add(buf, alpha=mu) if nesterov else buf; param.add_(d_p, alpha=-lr) */
static void k_momentum(float *restrict p, const float *restrict g, float *restrict b, size_t n,
                       float lr, float wd, float mu, float one_m_damp, int first, int nesterov) {
#pragma omp parallel for simd if (n >= OPT_PAR_MIN) schedule(static)
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    float bi = first ? d : b[i] * mu + one_m_damp * d;
    b[i] = bi;
    float u = nesterov ? d + mu * bi : bi;
    p[i] = p[i] + (-lr) * u;
  }
}

/* (AdamW: param.mul_(1 - lr*wd) first, with l2 = 0)
 * grad = grad.add(param, alpha=l2); exp_avg.mul_(b1).add_(grad, alpha=1-b1);
 * exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2);
 * denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps); param.addcdiv_(exp_avg, denom, value=-step_size) */
static void k_adam(float *restrict p, const float *restrict g, float *restrict m,
                   float *restrict v, size_t n, float l2, float decay_mul, float b1,
                   float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps,
                   float neg_step_size) {
#pragma omp parallel for simd if (n >= OPT_PAR_MIN) schedule(static)
  for (size_t i = 0; i < n; i++) {
    float pi = p[i] * decay_mul;
    float d = g[i] + l2 * pi;
    float mi = m[i] * b1 + one_m_b1 * d;
    float vi = v[i] * b2 + one_m_b2 * (d * d);
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / denom;
  }
}

/* LAMB update direction from the (already updated) moments. */
static inline float lamb_u(float m, float v, float p, float inv_bc1, float inv_bc2, float eps,
                           float wd) {
  return (m * inv_bc1) / (sqrtf(v * inv_bc2) + eps) + wd * p;
}

/* Pass 1 over one segment: moments, and block sums of p^2 and u^2 into part[2b], part[2b+1]. */
static void k_lamb_pass1(const float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, double *part, float b1, float one_m_b1,
                         float b2, float one_m_b2, float inv_bc1, float inv_bc2, float eps,
                         float wd) {
  size_t nb = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for if (n >= OPT_PAR_MIN) schedule(static)
  for (size_t blk = 0; blk < nb; blk++) {
    size_t lo = blk * OPT_BLOCK, hi = lo + OPT_BLOCK < n ? lo + OPT_BLOCK : n;
    double sp = 0, su = 0;
#pragma omp simd reduction(+ : sp, su)
    for (size_t i = lo; i < hi; i++) {
      float mi = m[i] * b1 + one_m_b1 * g[i];
      float vi = v[i] * b2 + one_m_b2 * (g[i] * g[i]);
      m[i] = mi;
      v[i] = vi;
      float u = lamb_u(mi, vi, p[i], inv_bc1, inv_bc2, eps, wd);
      sp += (double)p[i] * p[i];
      su += (double)u * u;
    }
    part[2 * blk] = sp;
    part[2 * blk + 1] = su;
  }
}

static void k_lamb_pass2(float *restrict p, const float *restrict m, const float *restrict v,
                         size_t n, float neg_ratio, float inv_bc1, float inv_bc2, float eps,
                         float wd) {
#pragma omp parallel for simd if (n >= OPT_PAR_MIN) schedule(static)
  for (size_t i = 0; i < n; i++) {
    float u = lamb_u(m[i], v[i], p[i], inv_bc1, inv_bc2, eps, wd);
    p[i] = p[i] + neg_ratio * u;
  }
}

/* Segment s's parameters and gradients: at their offset in the flat buffers, or where pp / gp
 * (ts_optim_step_segments) say. */
#define SEG_P(s) (pp ? pp[s] : params + o->seg[s].offset)
#define SEG_G(s) (gp ? gp[s] : grads + o->seg[s].offset)

static int step_lamb(ts_optim *o, float *params, const float *grads, float *const *pp, const float *const *gp,
                     float lr) {
  const ts_optim_config *c = &o->cfg;
  double t = (double)o->step;
  float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
  float omb1 = (float)(1.0 - c->beta1), omb2 = (float)(1.0 - c->beta2);
  float inv_bc1 = (float)(1.0 / (1.0 - pow(c->beta1, t)));
  float inv_bc2 = (float)(1.0 / (1.0 - pow(c->beta2, t)));
  for (int s = 0; s < o->nseg; s++) {
    const ts_optim_segment *sg = &o->seg[s];
    o->sums[2 * s] = o->sums[2 * s + 1] = 0;
    if (sg->flags & TS_SEG_FROZEN) continue;
    float wd = (float)ts_optim_segment_wd(c, sg);
    size_t off = sg->offset, n = sg->numel, nb = (n + OPT_BLOCK - 1) / OPT_BLOCK;
    k_lamb_pass1(SEG_P(s), SEG_G(s), o->slot[0] + off, o->slot[1] + off, n, o->part, b1,
                 omb1, b2, omb2, inv_bc1, inv_bc2, eps, wd);
    double sp = 0, su = 0;
    for (size_t b = 0; b < nb; b++) {
      sp += o->part[2 * b];
      su += o->part[2 * b + 1];
    }
    o->sums[2 * s] = sp;
    o->sums[2 * s + 1] = su;
  }
  if (o->reduce) {
    int rc = o->reduce(o->sums, 2 * o->nseg, o->reduce_user);
    if (rc) return ts_error_wrap(rc, "LAMB: norm reduction failed at step %lld",
                                 (long long)o->step);
  }
  for (int s = 0; s < o->nseg; s++) {
    const ts_optim_segment *sg = &o->seg[s];
    if (sg->flags & TS_SEG_FROZEN) continue;
    float wd = (float)ts_optim_segment_wd(c, sg), slr = ts_optim_segment_lr(c, sg, lr);
    float ratio = 1.0f;
    if (c->lamb_always_adapt || wd != 0.0f) {
      float pn = (float)sqrt(o->sums[2 * s]), un = (float)sqrt(o->sums[2 * s + 1]);
      if (pn != 0.0f && un != 0.0f) ratio = pn / un;
    }
    size_t off = sg->offset;
    k_lamb_pass2(SEG_P(s), o->slot[0] + off, o->slot[1] + off, sg->numel, -(slr * ratio),
                 inv_bc1, inv_bc2, eps, wd);
  }
  return TS_OK;
}

/* The update's scalars for the step count o->step (PyTorch's, computed once per step). */
typedef struct {
  float b1, b2, eps, omb1, omb2, neg_step, bc2_sqrt;
} coef;

static coef coefs(const ts_optim *o, float lr) {
  const ts_optim_config *c = &o->cfg;
  double t = (double)o->step;
  /* Scalars as ATen receives them (Python floats -> f32 in the kernel). */
  double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
  coef k = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)(1.0 - c->beta1), (float)(1.0 - c->beta2),
            (float)(-((double)lr / bc1)), (float)sqrt(bc2)};
  return k;
}

/* Segment s's elements [at, at + n) of its state updated from p and g (n of each); k: the step's
 * scalars at learning rate lr (a segment of a group of its own: recomputed at its rate). */
static int update(ts_optim *o, int s, const coef *k0, float *p, const float *g, size_t at, size_t n, float lr) {
  const ts_optim_config *c = &o->cfg;
  const ts_optim_segment *sg = &o->seg[s];
  double wd = ts_optim_segment_wd(c, sg);
  coef kg;
  const coef *k = k0;
  if (TS_SEG_GROUP_OF(sg->flags)) {
    lr = ts_optim_segment_lr(c, sg, lr);
    kg = coefs(o, lr);
    k = &kg;
  }
  size_t off = sg->offset + at;
  switch (c->kind) {
    case TS_OPTIM_SGD: k_sgd(p, g, n, lr, (float)wd); break;
    case TS_OPTIM_MOMENTUM:
      k_momentum(p, g, o->slot[0] + off, n, lr, (float)wd, (float)c->momentum, (float)(1.0 - c->dampening),
                 o->step == 1, c->nesterov);
      break;
    case TS_OPTIM_ADAM:
      k_adam(p, g, o->slot[0] + off, o->slot[1] + off, n, (float)wd, 1.0f, k->b1, k->omb1, k->b2, k->omb2, k->bc2_sqrt,
             k->eps, k->neg_step);
      break;
    case TS_OPTIM_ADAMW:
      k_adam(p, g, o->slot[0] + off, o->slot[1] + off, n, 0.0f, (float)(1.0 - (double)lr * wd), k->b1, k->omb1, k->b2,
             k->omb2, k->bc2_sqrt, k->eps, k->neg_step);
      break;
    default: return ts_error_set(TS_EINVAL, "ts_optim_step: invalid optimizer kind");
  }
  return TS_OK;
}

static int step(ts_optim *o, float *params, const float *grads, float *const *pp, const float *const *gp,
                float lr) {
  o->step++;
  if (o->cfg.kind == TS_OPTIM_LAMB) return step_lamb(o, params, grads, pp, gp, lr);
  coef k = coefs(o, lr);
  for (int s = 0; s < o->nseg; s++) {
    if (o->seg[s].flags & TS_SEG_FROZEN) continue;
    int rc = update(o, s, &k, SEG_P(s), SEG_G(s), 0, o->seg[s].numel, lr);
    if (rc) return rc;
  }
  return TS_OK;
}

int ts_optim_step(ts_optim *o, float *params, const float *grads, float lr) {
  if (!o || ((!params || !grads) && o->extent))
    return ts_error_set(TS_EINVAL, "ts_optim_step: NULL argument");
  return step(o, params, grads, NULL, NULL, lr);
}

int ts_optim_step_segments(ts_optim *o, float *const *params, const float *const *grads, float lr) {
  if (!o || ((!params || !grads) && o->nseg))
    return ts_error_set(TS_EINVAL, "ts_optim_step_segments: NULL argument");
  for (int s = 0; s < o->nseg; s++)
    if (o->seg[s].numel && (!params[s] || !grads[s]))
      return ts_error_set(TS_EINVAL, "ts_optim_step_segments: segment '%s' has no %s", o->seg[s].name,
                          params[s] ? "gradients" : "parameters");
  return step(o, NULL, NULL, params, grads, lr);
}

#define OPT_MIX_CHUNK 65536 /* gradients widened at a time by ts__optim_step_mixed */

int ts__optim_step_mixed(ts_optim *o, float *const *pp, const void *const *gp, const ts_dtype *gdt, float gscale,
                         float lr) {
  if (!o || ((!pp || !gp || !gdt) && o->nseg)) return ts_error_set(TS_EINVAL, "ts__optim_step_mixed: NULL argument");
  if (o->cfg.kind == TS_OPTIM_LAMB)
    return ts_error_set(TS_EINVAL, "ts__optim_step_mixed: LAMB's trust ratios need whole f32 gradients");
  for (int s = 0; s < o->nseg; s++) {
    if (o->seg[s].numel && (!pp[s] || !gp[s]))
      return ts_error_set(TS_EINVAL, "ts__optim_step_mixed: segment '%s' has no %s", o->seg[s].name,
                          pp[s] ? "gradients" : "parameters");
    if (gdt[s] != TS_F32 && gdt[s] != TS_BF16 && gdt[s] != TS_F16)
      return ts_error_set(TS_EINVAL, "ts__optim_step_mixed: segment '%s': gradients of dtype %s", o->seg[s].name,
                          ts_dtype_name(gdt[s]));
  }
  if (!o->mix && !(o->mix = ts_alloc(OPT_MIX_CHUNK * sizeof(float))))
    return ts_error_set(TS_ENOMEM, "ts__optim_step_mixed: out of memory");
  o->step++;
  coef k = coefs(o, lr);
  for (int s = 0; s < o->nseg; s++) {
    if (o->seg[s].flags & TS_SEG_FROZEN) continue;
    size_t n = o->seg[s].numel, es = ts_dtype_size(gdt[s]);
    if (gdt[s] == TS_F32 && gscale == 1.0f) { /* read where it is */
      int rc = update(o, s, &k, pp[s], gp[s], 0, n, lr);
      if (rc) return rc;
      continue;
    }
    for (size_t at = 0; at < n; at += OPT_MIX_CHUNK) {
      size_t m = n - at < OPT_MIX_CHUNK ? n - at : OPT_MIX_CHUNK;
      int rc = ts_convert((const char *)gp[s] + at * es, gdt[s], o->mix, TS_F32, m);
      if (!rc && gscale != 1.0f)
        for (size_t i = 0; i < m; i++) o->mix[i] *= gscale;
      if (!rc) rc = update(o, s, &k, pp[s] + at, o->mix, at, m, lr);
      if (rc) return rc;
    }
  }
  return TS_OK;
}

int ts_optim_num_segments(const ts_optim *o) { return o ? o->nseg : 0; }

const ts_optim_segment *ts_optim_segment_at(const ts_optim *o, int s) {
  return o && s >= 0 && s < o->nseg ? &o->seg[s] : NULL;
}
