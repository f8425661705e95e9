/* The memory one rank holds (src/distribution/dist.h, ts_dist_memory): every buffer a layout
 * allocates for training, counted from the object's store, its optimizer-state sharding and its
 * plans. A real job and a dry run of the same rank give the same figures: the trainer measures
 * with this, `tessera plan` predicts with it and train.max_memory_mb is checked against it
 * (docs/memory.md). A layout or sharding stage that allocates other buffers counts them here. */
#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "dist_impl.h"

/* Trainable elements whose gradients are reduced over several ranks (held by more than one). */
static int reduced_numel(const ts_dist *d, size_t *out) {
  const ts_dist_run *r = &d->r;
  *out = 0;
  if (!d->vt->world || r->size < 2) return TS_OK;
  for (int i = 0; i < ts_params_count(r->params); i++) {
    if (ts_params_flags(r->params, i) & TS_PARAM_STATE) continue;
    int h = ts_params_holders(r->params, i, r->size, r->rank);
    if (h == TS_ENOMEM) return ts_error_wrap(h, "memory figures");
    ts_shape s = ts_params_shape(r->params, i);
    if (h > 1) *out += (size_t)ts_shape_numel(&s);
  }
  return TS_OK;
}

int64_t ts_dist_memory_sum(const ts_dist_memory_info *m) {
  return m->param_bytes + m->grad_bytes + m->optimizer_state_bytes + m->activation_bytes + m->eval_activation_bytes;
}

int ts_dist_memory(ts_dist *d, int optim_slots, ts_dist_memory_info *out) {
  memset(out, 0, sizeof *out);
  const ts_dist_run *r = &d->r;
  if (!r->params) return ts_error_set(TS_EINVAL, "ts_dist_memory: the model is not built (ts_dist_build)");
  const int64_t f = (int64_t)sizeof(float);
  int64_t n = (int64_t)ts_params_numel(r->params), ns = (int64_t)ts_params_state_numel(r->params);
  /* the store: parameters, states, and the gradient buffer backward writes (ts_params_alloc) */
  out->param_bytes = (n + ns) * f;
  out->grad_bytes = n * f;
  int64_t opt_elems = n; /* the rank's optimizer covers every trainable element of its store */
  /* the sync object's buffers (sync.h): ZeRO's work buffer, staging slots and gather slots in
   * place of whole-model ones; the accumulation buffer where the caller provides one */
  int rc = d->sync.vt->memory(d, out, &opt_elems);
  if (rc) return rc;
  out->grad_bytes += out->accum_bytes;
  /* gradient compression: the reducer's wire copy of every gradient reduced over several ranks
   * (optimizer sharding's wire slots instead: counted by its memory above) */
  if (d->cfg.wire != TS_F32 && !ts_dist_optim_sharded(d, NULL, NULL)) {
    size_t red = 0;
    int rc = reduced_numel(d, &red);
    if (rc) return rc;
    out->grad_bytes += (int64_t)(red * ts_dtype_size(d->cfg.wire));
  }
  out->optimizer_state_bytes = (int64_t)(optim_slots > 0 ? optim_slots : 0) * opt_elems * f;
  ts_dist_activation_bytes(d, 0, &out->activation_bytes, &out->eval_activation_bytes);
  out->total_bytes = ts_dist_memory_sum(out);
  return TS_OK;
}

void ts_dist_memory_format(const ts_dist_memory_info *m, char *buf, size_t cap) {
  char a[32], b[32], c[32], e[32], g[32], h[32], t[32];
  size_t n = 0;
  if (!cap) return;
  buf[0] = 0;
  ts__app(buf, cap, &n, "params %s, grads %s", ts__human_bytes((double)m->param_bytes, a, sizeof a),
          ts__human_bytes((double)m->grad_bytes, b, sizeof b));
  if (m->accum_bytes) ts__app(buf, cap, &n, " (accumulation %s)", ts__human_bytes((double)m->accum_bytes, h, sizeof h));
  ts__app(buf, cap, &n, ", optimizer %s, activations %s (+ eval %s), total %s",
          ts__human_bytes((double)m->optimizer_state_bytes, c, sizeof c),
          ts__human_bytes((double)m->activation_bytes, e, sizeof e),
          ts__human_bytes((double)m->eval_activation_bytes, g, sizeof g),
          ts__human_bytes((double)ts_dist_memory_sum(m), t, sizeof t));
}
