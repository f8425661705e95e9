/* The input pipeline (docs/data-pipeline.md):
 *
 *   sampler indices of epoch e --(shuffle buffer: a seeded permutation of positions)--> order
 *   order cut into batches --> batch slots --(workers: ts_source_get + transforms per sample)-->
 *   stacked batch --> consumer, in batch sequence order
 *
 * Everything that decides *what* goes where (sampler, shuffle buffer, augmentation keys) is a pure
 * function of (seed, epoch, position), computed without decoding anything; workers only decide
 * *when* a sample gets decoded. Each sample lands in its own place in its batch, and batches are
 * handed out by sequence number, so the output is bit-identical for any number of workers, and
 * ts_pipeline_seek can jump to any batch by recomputing the index stream alone.
 *
 * Concurrency: one mutex, two condition variables (work available / batch ready). A batch slot
 * goes FREE -> FILLING (workers claim chunks of its samples) -> READY (the worker finishing its
 * last chunk stacks it) -> HELD (returned to the consumer until the next call) -> FREE. Up to
 * max(prefetch, num_workers) batches are prepared ahead of the one the consumer holds. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "transform_internal.h"

#define STREAM_AUG 0x4155474d454e54ULL  /* augmentation keys */
#define STREAM_SHUF 0x5348554646ULL     /* shuffle buffer */

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct {
  int state;
  int64_t seq, epoch, index; /* batch sequence number = epoch * batches_per_epoch + index */
  int n, next, done;         /* samples in the batch, next to claim, finished */
  int64_t *idx;              /* dataset index of each sample */
  ts_sample *smp;
  int err, err_pos; /* first failure (lowest position) */
  char *errmsg;
  ts_tensor data, labels, target;
} slot;

struct ts_pipeline {
  ts_pipeline_config cfg;
  ts_transform *tf;
  ts_sampler *sampler;
  int64_t L, bpe, end_seq; /* samples and batches per epoch; first seq past the end (-1: never) */
  int B, chunk;

  /* producer cursor */
  int64_t next_seq;    /* next batch to claim */
  int64_t *order;      /* dataset indices of order_epoch in pipeline order */
  int64_t order_epoch; /* -1: none */
  int order_err;
  char *order_msg;

  /* consumer */
  int64_t want_seq;
  int held; /* slot returned by the last ts_pipeline_next, -1 if none */
  int sticky;
  char *sticky_msg;

  int nslots;
  slot *slots;

  int nthreads, running;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, ready_cv;
  atomic_int stop;
};

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t ts__sample_key(uint64_t seed, int64_t epoch, int64_t index) {
  ts_philox_out o = ts_philox4x32(mix64(mix64(seed) ^ STREAM_AUG), (uint64_t)epoch, (uint64_t)index);
  return (uint64_t)o.v[0] | (uint64_t)o.v[1] << 32;
}

ts_pipeline_config ts_pipeline_config_default(void) {
  ts_pipeline_config c;
  memset(&c, 0, sizeof c);
  c.sampler.kind = TS_SAMPLER_SEQUENTIAL;
  c.sampler.shuffle = 1;
  c.sampler.num_shards = 1;
  c.batch_size = 1;
  c.prefetch = 2;
  c.epochs = 1;
  return c;
}

/* ---- the index stream ---- */

/* Shuffle buffer of `size` over positions 0..L-1 (fill, then each new element replaces a random
 * one that is emitted; drain in random order at the end of the epoch). */
static inline int64_t draw_below(uint64_t key, int64_t epoch, uint64_t r, int64_t bound) {
  ts_philox_out o = ts_philox4x32(key, (uint64_t)epoch, r);
  uint64_t x = (uint64_t)o.v[0] | (uint64_t)o.v[1] << 32;
  return (int64_t)(((unsigned __int128)x * (uint64_t)bound) >> 64);
}

static void shuffle_buffer_order(int64_t L, int64_t size, uint64_t seed, int64_t epoch, int64_t *out,
                                 int64_t *buf) {
  const uint64_t key = mix64(mix64(seed) ^ STREAM_SHUF);
  uint64_t r = 0;
  int64_t nb = 0, m = 0;
  for (int64_t p = 0; p < L; p++) {
    if (nb < size) {
      buf[nb++] = p;
      continue;
    }
    int64_t j = draw_below(key, epoch, r++, size);
    out[m++] = buf[j];
    buf[j] = p;
  }
  while (nb > 0) {
    int64_t j = draw_below(key, epoch, r++, nb);
    out[m++] = buf[j];
    buf[j] = buf[--nb];
  }
}

/* Makes p->order the order of `epoch` (under the lock). */
static int compute_order(ts_pipeline *p, int64_t epoch) {
  if (p->order_epoch == epoch) return p->order_err;
  p->order_epoch = epoch;
  p->order_err = ts_sampler_indices(p->sampler, epoch, p->order);
  if (p->order_err == TS_OK && p->cfg.shuffle_buffer > 0 && p->L > 1) {
    int64_t size = p->cfg.shuffle_buffer < p->L ? p->cfg.shuffle_buffer : p->L;
    /* pos: L positions in emission order, then the buffer, then a copy of the indices */
    int64_t *pos = malloc(sizeof *pos * (size_t)(2 * p->L + size));
    if (!pos) {
      p->order_err = ts_error_set(TS_ENOMEM, "pipeline: out of memory for the shuffle buffer");
    } else {
      int64_t *idx = pos + p->L + size;
      shuffle_buffer_order(p->L, size, p->cfg.seed, epoch, pos, pos + p->L);
      memcpy(idx, p->order, sizeof *idx * (size_t)p->L);
      for (int64_t k = 0; k < p->L; k++) p->order[k] = idx[pos[k]];
      free(pos);
    }
  }
  free(p->order_msg);
  p->order_msg = NULL;
  if (p->order_err) {
    char buf[600];
    snprintf(buf, sizeof buf, "pipeline epoch %lld: %s", (long long)epoch, ts_last_error());
    p->order_msg = strdup(buf);
  }
  return p->order_err;
}

static void slot_set_error(slot *s, int pos, int code, const char *msg) {
  if (s->err && s->err_pos <= pos) return;
  s->err = code;
  s->err_pos = pos;
  free(s->errmsg);
  s->errmsg = strdup(msg ? msg : "");
}

/* Claims the next batch into a free slot (under the lock). Returns the slot or NULL. */
static slot *claim_batch(ts_pipeline *p) {
  if (p->end_seq >= 0 && p->next_seq >= p->end_seq) return NULL;
  if (p->bpe == 0) return NULL;
  slot *s = NULL;
  for (int i = 0; i < p->nslots; i++)
    if (p->slots[i].state == SLOT_FREE) {
      s = &p->slots[i];
      break;
    }
  if (!s) return NULL;
  int64_t seq = p->next_seq++;
  s->seq = seq;
  s->epoch = seq / p->bpe;
  s->index = seq % p->bpe;
  s->err = 0;
  s->err_pos = -1;
  s->next = s->done = 0;
  int64_t first = s->index * p->B, n = p->L - first < p->B ? p->L - first : p->B;
  s->n = (int)n;
  s->state = SLOT_FILLING;
  if (compute_order(p, s->epoch)) {
    slot_set_error(s, -1, p->order_err, p->order_msg);
    s->next = s->done = s->n; /* nothing to decode */
    s->state = SLOT_READY;
    return s;
  }
  memcpy(s->idx, p->order + first, sizeof *s->idx * (size_t)n);
  return s;
}

/* "sample 17 (/data/test/cat/img3.png)" or "sample 17" when the source names none; the name is
 * left out when `reason` already holds it. */
static const char *sample_desc(const ts_pipeline *p, int64_t idx, const char *reason, char *buf, size_t cap) {
  char name[600];
  if (ts_source_sample_name(p->cfg.source, idx, name, sizeof name) && !(reason && strstr(reason, name)))
    snprintf(buf, cap, "sample %lld (%s)", (long long)idx, name);
  else
    snprintf(buf, cap, "sample %lld", (long long)idx);
  return buf;
}

/* "test split: " (the pipeline's name) or "" */
static const char *split_prefix(const ts_pipeline *p, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s", p->cfg.name ? p->cfg.name : "", p->cfg.name ? ": " : "");
  return buf;
}

/* Decodes and transforms samples [k, k+c) of slot s (no lock held). */
static void process_chunk(ts_pipeline *p, slot *s, int k, int c, int *err, int *err_pos, char *msg,
                          size_t cap) {
  for (int i = k; i < k + c; i++) {
    if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return;
    if (*err) return; /* this batch fails anyway; its first error is already recorded */
    ts_sample *smp = &s->smp[i];
    int64_t idx = s->idx[i];
    int rc = ts_source_get(p->cfg.source, idx, smp);
    if (rc == TS_OK)
      rc = ts_transforms_apply(p->tf, p->cfg.ntransforms, smp, ts__sample_key(p->cfg.seed, s->epoch, idx));
    if (rc) {
      char why[1024], sd[700], pre[128];
      snprintf(why, sizeof why, "%s", ts_last_error());
      snprintf(msg, cap, "%s%s (epoch %lld, batch %lld, position %d): %s", split_prefix(p, pre, sizeof pre),
               sample_desc(p, idx, why, sd, sizeof sd), (long long)s->epoch, (long long)s->index, i, why);
      *err = rc;
      *err_pos = i;
      ts_sample_free(smp);
    }
  }
}

static int ensure_tensor(ts_tensor *t, ts_dtype dt, ts_shape shp) {
  if (t->data && t->dtype == dt && ts_shape_equal(&t->shape, &shp)) return TS_OK;
  ts_tensor_free(t);
  return ts_tensor_init(t, dt, shp);
}

/* data_internal.h (bench/bench_nonfinite.c measures it against a batch's transforms). */
int64_t ts__first_nonfinite_f32(const float *x, int64_t n) {
  const uint32_t *u = (const uint32_t *)x;
  for (int64_t b = 0; b < n; b += 64) {
    uint32_t bad = 0;
    if (n - b >= 64) { /* a fixed trip count: vectorised at -O2 too */
      const uint32_t *v = u + b;
      for (int i = 0; i < 64; i++) bad |= (v[i] & 0x7f800000u) == 0x7f800000u;
    } else {
      bad = 1;
    }
    if (!bad) continue;
    for (int64_t i = b; i < n && i < b + 64; i++)
      if ((u[i] & 0x7f800000u) == 0x7f800000u) return i;
  }
  return -1;
}

/* Stacks the samples of a finished slot (no lock held; the slot is not shared any more). */
static void stack_slot(const ts_pipeline *p, slot *s) {
  char msg[2048];
  if (s->err) goto done;
  const ts_tensor *d0 = &s->smp[0].data, *t0 = &s->smp[0].target;
  const ts_shape *want = &p->cfg.expect_shape;
  for (int i = 0; want->ndim > 0 && i < s->n; i++) { /* every sample, so the message names the one at fault */
    const ts_tensor *d = &s->smp[i].data;
    if (d->dtype == p->cfg.expect_dtype && ts_shape_equal(&d->shape, want)) continue;
    char sa[96], sb[96], sd[700];
    snprintf(msg, sizeof msg,
             "%s: %s (batch %lld of epoch %lld) is %s %s after the transforms, but the model was built "
             "for samples of %s %s (all samples of both splits must come out of their transforms alike)",
             p->cfg.name ? p->cfg.name : "data", sample_desc(p, s->idx[i], NULL, sd, sizeof sd),
             (long long)s->index, (long long)s->epoch,
             ts_shape_str(&d->shape, sa, sizeof sa), ts_dtype_name(d->dtype), ts_shape_str(want, sb, sizeof sb),
             ts_dtype_name(p->cfg.expect_dtype));
    slot_set_error(s, i, TS_ESHAPE, msg);
    goto done;
  }
  if (d0->shape.ndim >= TS_MAX_DIMS || (t0->data && t0->shape.ndim >= TS_MAX_DIMS)) {
    snprintf(msg, sizeof msg, "batch %lld of epoch %lld: sample %lld has %d dimensions (at most %d)",
             (long long)s->index, (long long)s->epoch, (long long)s->idx[0], d0->shape.ndim, TS_MAX_DIMS - 1);
    slot_set_error(s, 0, TS_ESHAPE, msg);
    goto done;
  }
  for (int i = 1; i < s->n; i++) {
    const ts_tensor *d = &s->smp[i].data, *t = &s->smp[i].target;
    const char *what = NULL;
    const ts_tensor *a = NULL, *b = NULL;
    if (d->dtype != d0->dtype || !ts_shape_equal(&d->shape, &d0->shape)) what = "data", a = d, b = d0;
    else if (!t->data != !t0->data) what = "target presence", a = t, b = t0;
    else if (t->data && (t->dtype != t0->dtype || !ts_shape_equal(&t->shape, &t0->shape)))
      what = "target", a = t, b = t0;
    if (what) {
      char sa[96] = "(none)", sb[96] = "(none)", da[700], db0[700], pre[128];
      if (a->data) ts_shape_str(&a->shape, sa, sizeof sa);
      if (b->data) ts_shape_str(&b->shape, sb, sizeof sb);
      snprintf(msg, sizeof msg,
               "%sbatch %lld of epoch %lld: cannot stack: %s (position %d) has %s %s %s but "
               "%s (position 0) has %s %s (use resize or crop to a common size)",
               split_prefix(p, pre, sizeof pre), (long long)s->index, (long long)s->epoch,
               sample_desc(p, s->idx[i], NULL, da, sizeof da), i, what, sa,
               a->data ? ts_dtype_name(a->dtype) : "", sample_desc(p, s->idx[0], NULL, db0, sizeof db0), sb,
               b->data ? ts_dtype_name(b->dtype) : "");
      slot_set_error(s, i, TS_ESHAPE, msg);
      goto done;
    }
  }
  for (int i = 0; d0->dtype == TS_F32 && i < s->n; i++) { /* inf/NaN inputs train at a constant loss, silently */
    const ts_tensor *d = &s->smp[i].data;
    int64_t e = ts__first_nonfinite_f32(d->data, ts_tensor_numel(d));
    if (e < 0) continue;
    char sd[700], pre[128];
    snprintf(msg, sizeof msg,
             "%s%s (batch %lld of epoch %lld) has a non-finite input after the transforms (element %lld is %g): "
             "check the transforms' parameters (normalize's mean and std, to_float's scale) and the data",
             split_prefix(p, pre, sizeof pre), sample_desc(p, s->idx[i], NULL, sd, sizeof sd), (long long)s->index,
             (long long)s->epoch, (long long)e, (double)((const float *)d->data)[e]);
    slot_set_error(s, i, TS_EFORMAT, msg);
    goto done;
  }
  int rc = ensure_tensor(&s->data, d0->dtype, ts_shape_batch(s->n, &d0->shape));
  if (!rc) rc = ensure_tensor(&s->labels, TS_I32, ts_shape1(s->n));
  if (!rc && t0->data) rc = ensure_tensor(&s->target, t0->dtype, ts_shape_batch(s->n, &t0->shape));
  if (!rc && !t0->data) ts_tensor_free(&s->target);
  if (rc) {
    snprintf(msg, sizeof msg, "batch %lld of epoch %lld: %s", (long long)s->index, (long long)s->epoch,
             ts_last_error());
    slot_set_error(s, 0, rc, msg);
    goto done;
  }
  const size_t db = ts_tensor_nbytes(d0), tb = t0->data ? ts_tensor_nbytes(t0) : 0;
  int32_t *lab = s->labels.data;
  for (int i = 0; i < s->n; i++) {
    memcpy((uint8_t *)s->data.data + (size_t)i * db, s->smp[i].data.data, db);
    if (tb) memcpy((uint8_t *)s->target.data + (size_t)i * tb, s->smp[i].target.data, tb);
    int64_t l = s->smp[i].label;
    lab[i] = l < INT32_MIN || l > INT32_MAX ? -1 : (int32_t)l;
  }
done:
  for (int i = 0; i < s->n; i++) ts_sample_free(&s->smp[i]);
}

/* Claims work under the lock: a chunk of the oldest filling batch, else a new batch. */
static slot *find_work(ts_pipeline *p, int *k, int *c) {
  slot *best = NULL;
  for (int i = 0; i < p->nslots; i++) {
    slot *s = &p->slots[i];
    if (s->state == SLOT_FILLING && s->next < s->n && (!best || s->seq < best->seq)) best = s;
  }
  if (!best) {
    best = claim_batch(p);
    if (best && best->state == SLOT_READY) { /* the epoch's order failed: report it */
      pthread_cond_broadcast(&p->ready_cv);
      return find_work(p, k, c);
    }
  }
  if (!best) return NULL;
  *k = best->next;
  *c = best->n - best->next < p->chunk ? best->n - best->next : p->chunk;
  best->next += *c;
  return best;
}

/* After processing a chunk (lock held on entry and exit). */
static void finish_chunk(ts_pipeline *p, slot *s, int c, int err, int err_pos, const char *msg) {
  if (err) slot_set_error(s, err_pos, err, msg);
  s->done += c;
  if (s->done == s->n) {
    pthread_mutex_unlock(&p->mu);
    if (!atomic_load(&p->stop)) stack_slot(p, s);
    pthread_mutex_lock(&p->mu);
    s->state = SLOT_READY;
    pthread_cond_broadcast(&p->ready_cv);
  }
}

static void *worker_main(void *arg) {
  ts_pipeline *p = arg;
  char msg[2048];
  pthread_mutex_lock(&p->mu);
  while (!atomic_load(&p->stop)) {
    int k, c;
    slot *s = find_work(p, &k, &c);
    if (!s) {
      pthread_cond_wait(&p->work_cv, &p->mu);
      continue;
    }
    /* no need to decode a chunk after a known failure: the batch reports its first failing
     * position, which is before this chunk (chunks before a failure are always decoded, so the
     * reported sample does not depend on scheduling) */
    int skip = s->err && s->err_pos < k, err = 0, err_pos = -1;
    pthread_mutex_unlock(&p->mu);
    if (!skip) process_chunk(p, s, k, c, &err, &err_pos, msg, sizeof msg);
    pthread_mutex_lock(&p->mu);
    finish_chunk(p, s, c, err, err_pos, msg);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- lifecycle ---- */

static void reset_slots(ts_pipeline *p) {
  for (int i = 0; p->slots && i < p->nslots; i++) {
    slot *s = &p->slots[i];
    for (int j = 0; s->smp && j < p->B; j++) ts_sample_free(&s->smp[j]);
    s->state = SLOT_FREE;
    s->err = 0;
    free(s->errmsg);
    s->errmsg = NULL;
  }
  p->held = -1;
}

static void stop_workers(ts_pipeline *p) {
  if (!p->running) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->running; i++) pthread_join(p->threads[i], NULL);
  p->running = 0;
  atomic_store(&p->stop, 0);
}

static int start_workers(ts_pipeline *p) {
  for (int i = 0; i < p->nthreads; i++) {
    int e = pthread_create(&p->threads[i], NULL, worker_main, p);
    if (e) {
      stop_workers(p);
      return ts_error_set(TS_ENOMEM, "pipeline: cannot start worker thread %d of %d: %s", i, p->nthreads,
                          strerror(e));
    }
    p->running = i + 1;
  }
  return TS_OK;
}

void ts_pipeline_free(ts_pipeline *p) {
  if (!p) return;
  stop_workers(p);
  reset_slots(p);
  for (int i = 0; p->slots && i < p->nslots; i++) {
    slot *s = &p->slots[i];
    free(s->idx);
    free(s->smp);
    ts_tensor_free(&s->data);
    ts_tensor_free(&s->labels);
    ts_tensor_free(&s->target);
  }
  free(p->slots);
  free(p->threads);
  free(p->order);
  free(p->order_msg);
  free(p->sticky_msg);
  free(p->tf);
  ts_sampler_free(p->sampler);
  pthread_cond_destroy(&p->work_cv);
  pthread_cond_destroy(&p->ready_cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int ts_pipeline_create(const ts_pipeline_config *cfg, ts_pipeline **out) {
  if (out) *out = NULL;
  if (!cfg || !out) return ts_error_set(TS_EINVAL, "ts_pipeline_create: NULL argument");
  if (!cfg->source) return ts_error_set(TS_EINVAL, "pipeline: no source");
  if (cfg->batch_size < 1) return ts_error_set(TS_EINVAL, "pipeline: batch_size %d (must be >= 1)", cfg->batch_size);
  if (cfg->num_workers < 0 || cfg->num_workers > 256)
    return ts_error_set(TS_EINVAL, "pipeline: num_workers %d (0..256)", cfg->num_workers);
  if (cfg->ntransforms < 0 || (cfg->ntransforms > 0 && !cfg->transforms))
    return ts_error_set(TS_EINVAL, "pipeline: %d transforms but no transform array", cfg->ntransforms);
  if (cfg->shuffle_buffer < 0) return ts_error_set(TS_EINVAL, "pipeline: shuffle_buffer %d (must be >= 0)", cfg->shuffle_buffer);
  if (cfg->prefetch < 0) return ts_error_set(TS_EINVAL, "pipeline: prefetch %d (must be >= 0)", cfg->prefetch);
  if (cfg->epochs < -1) return ts_error_set(TS_EINVAL, "pipeline: epochs %lld (-1 = forever, or >= 0)", (long long)cfg->epochs);

  ts_pipeline *p = calloc(1, sizeof *p);
  if (!p) return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
  p->cfg = *cfg;
  p->B = cfg->batch_size;
  p->held = -1;
  p->order_epoch = -1;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->ready_cv, NULL);
  atomic_init(&p->stop, 0);

  int rc;
  if (cfg->ntransforms > 0) {
    p->tf = malloc(sizeof *p->tf * (size_t)cfg->ntransforms);
    if (!p->tf) goto oom;
    memcpy(p->tf, cfg->transforms, sizeof *p->tf * (size_t)cfg->ntransforms);
  }
  p->cfg.transforms = p->tf;
  ts_sampler_config sc = cfg->sampler;
  sc.seed = cfg->seed; /* one seed for the whole pipeline */
  rc = ts_sampler_create(&sc, cfg->source, &p->sampler);
  if (rc) {
    ts_error_wrap(rc, "pipeline");
    ts_pipeline_free(p);
    return rc;
  }
  p->L = ts_sampler_len(p->sampler);
  p->bpe = cfg->drop_remainder ? p->L / p->B : (p->L + p->B - 1) / p->B;
  p->end_seq = cfg->epochs < 0 ? -1 : cfg->epochs * p->bpe;
  if (p->bpe == 0) p->end_seq = 0;
  p->order = malloc(sizeof *p->order * (size_t)(p->L ? p->L : 1));
  if (!p->order) goto oom;

  p->nthreads = cfg->num_workers;
  int ahead = cfg->prefetch > cfg->num_workers ? cfg->prefetch : cfg->num_workers;
  p->nslots = (cfg->num_workers ? (ahead > 1 ? ahead : 1) : 0) + 1;
  p->chunk = cfg->num_workers > 0 ? (p->B + 2 * cfg->num_workers - 1) / (2 * cfg->num_workers) : p->B;
  if (p->chunk < 1) p->chunk = 1;
  p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
  p->threads = calloc((size_t)(p->nthreads ? p->nthreads : 1), sizeof *p->threads);
  if (!p->slots || !p->threads) goto oom;
  for (int i = 0; i < p->nslots; i++) {
    p->slots[i].idx = malloc(sizeof(int64_t) * (size_t)p->B);
    p->slots[i].smp = calloc((size_t)p->B, sizeof(ts_sample));
    if (!p->slots[i].idx || !p->slots[i].smp) goto oom;
  }
  rc = start_workers(p);
  if (rc) {
    ts_pipeline_free(p);
    return rc;
  }
  *out = p;
  return TS_OK;
oom:
  ts_pipeline_free(p);
  return ts_error_set(TS_ENOMEM, "pipeline: out of memory");
}

int64_t ts_pipeline_batches_per_epoch(const ts_pipeline *p) { return p ? p->bpe : 0; }

int ts_pipeline_next(ts_pipeline *p, ts_batch *out) {
  if (!p || !out) return ts_error_set(TS_EINVAL, "ts_pipeline_next: NULL argument");
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&p->mu);
  if (p->held >= 0) {
    p->slots[p->held].state = SLOT_FREE;
    p->held = -1;
    pthread_cond_broadcast(&p->work_cv);
  }
  if (p->sticky) {
    int code = p->sticky;
    pthread_mutex_unlock(&p->mu);
    return ts_error_set(code, "%s", p->sticky_msg ? p->sticky_msg : "pipeline failed earlier");
  }
  if (p->end_seq >= 0 && p->want_seq >= p->end_seq) {
    pthread_mutex_unlock(&p->mu);
    out->epoch = p->bpe ? p->want_seq / p->bpe : 0;
    return TS_OK; /* size 0: the end */
  }
  slot *s = NULL;
  if (p->nthreads == 0) { /* decode in the calling thread, through the same steps as a worker */
    s = claim_batch(p);
    pthread_mutex_unlock(&p->mu);
    if (s && s->state == SLOT_FILLING) {
      char msg[2048];
      int err = 0, err_pos = -1;
      process_chunk(p, s, 0, s->n, &err, &err_pos, msg, sizeof msg);
      if (err) slot_set_error(s, err_pos, err, msg);
      s->done = s->next = s->n;
      stack_slot(p, s);
      s->state = SLOT_READY;
    }
    pthread_mutex_lock(&p->mu);
  } else {
    for (;;) {
      for (int i = 0; i < p->nslots && !s; i++)
        if (p->slots[i].state == SLOT_READY && p->slots[i].seq == p->want_seq) s = &p->slots[i];
      if (s) break;
      pthread_cond_wait(&p->ready_cv, &p->mu);
    }
  }
  if (!s) { /* cannot happen: a free slot always exists here */
    pthread_mutex_unlock(&p->mu);
    return ts_error_set(TS_EINVAL, "pipeline: internal error: no slot for batch %lld", (long long)p->want_seq);
  }
  s->state = SLOT_HELD;
  p->held = (int)(s - p->slots);
  p->want_seq++;
  if (s->err) {
    p->sticky = s->err;
    free(p->sticky_msg);
    p->sticky_msg = strdup(s->errmsg ? s->errmsg : "");
    int code = s->err;
    pthread_mutex_unlock(&p->mu);
    return ts_error_set(code, "%s", p->sticky_msg ? p->sticky_msg : "pipeline: sample failed");
  }
  pthread_mutex_unlock(&p->mu);
  out->data = s->data;
  out->labels = s->labels;
  if (s->target.data) out->target = s->target;
  out->data.owns = out->labels.owns = out->target.owns = 0;
  out->size = s->n;
  out->epoch = s->epoch;
  out->index = s->index;
  return TS_OK;
}

int ts_pipeline_seek(ts_pipeline *p, int64_t epoch, int64_t index) {
  if (!p) return ts_error_set(TS_EINVAL, "ts_pipeline_seek: NULL pipeline");
  if (epoch < 0 || index < 0 || index > p->bpe)
    return ts_error_set(TS_ERANGE, "pipeline seek: (epoch %lld, batch %lld) out of range (batches per epoch %lld)",
                        (long long)epoch, (long long)index, (long long)p->bpe);
  int64_t seq = epoch * p->bpe + index;
  if (p->end_seq >= 0 && seq > p->end_seq)
    return ts_error_set(TS_ERANGE, "pipeline seek: (epoch %lld, batch %lld) is past the end (%lld epochs of %lld batches)",
                        (long long)epoch, (long long)index, (long long)p->cfg.epochs, (long long)p->bpe);
  stop_workers(p);
  reset_slots(p);
  p->next_seq = p->want_seq = seq;
  p->sticky = 0;
  free(p->sticky_msg);
  p->sticky_msg = NULL;
  return start_workers(p);
}
