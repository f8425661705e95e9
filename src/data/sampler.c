/* Samplers: which sample indices one shard sees in one epoch (docs/data-pipeline.md).
 *
 * Every shard computes its own list from (config, epoch, labels) alone, so all shards agree on
 * the number of samples per epoch and on who gets what without communicating:
 *   L = ceil(n / S) (drop_last = 0: pad by wrapping) or floor(n / S) (drop_last = 1).
 * Random permutations are Fisher-Yates shuffles whose draws come from Philox keyed by the seed,
 * with the epoch as the high counter word, so epoch e's order is a pure function of (seed, e). */
#include <stdlib.h>
#include <string.h>

#include "tessera/data.h"

/* Stream tags mixed into the seed, so the sampler's streams never coincide with each other. */
#define STREAM_PERM 0x5045524d5554ULL   /* global permutation */
#define STREAM_CLASS 0x434c41535353ULL  /* per-class permutation (stratified) */
#define STREAM_SHARD 0x5348415244ULL    /* per-shard order (stratified) */
#define STREAM_ROT 0x524f54ULL          /* dealing rotation (stratified) */

struct ts_sampler {
  ts_sampler_config cfg;
  int S, shard;
  int64_t n, len;
  /* stratified: sample indices grouped by class (ascending within a class) */
  int ncls;
  int64_t *cls_start; /* ncls + 1 */
  int64_t *by_class;  /* n */
};

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

static uint64_t stream_key(uint64_t seed, uint64_t tag) { return mix64(mix64(seed) ^ tag); }

/* Uniform integer in [0, bound) from 64 random bits (multiply-shift; bias < bound / 2^64). */
static inline uint64_t bounded64(uint64_t r, uint64_t bound) {
  return (uint64_t)(((unsigned __int128)r * bound) >> 64);
}

/* Fisher-Yates shuffle of a[0..n) with draws Philox(key, (epoch, i)). */
static void shuffle_i64(int64_t *a, int64_t n, uint64_t key, uint64_t epoch) {
  for (int64_t i = n - 1; i > 0; i--) {
    ts_philox_out o = ts_philox4x32(key, epoch, (uint64_t)i);
    uint64_t r = (uint64_t)o.v[0] | (uint64_t)o.v[1] << 32;
    int64_t j = (int64_t)bounded64(r, (uint64_t)i + 1);
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static const char *kind_name(ts_sampler_kind k) {
  switch (k) {
    case TS_SAMPLER_SEQUENTIAL: return "sequential";
    case TS_SAMPLER_RANDOM: return "random";
    case TS_SAMPLER_DISTRIBUTED: return "distributed";
    case TS_SAMPLER_STRATIFIED: return "stratified";
  }
  return "?";
}

int ts_sampler_create(const ts_sampler_config *cfg, ts_source *src, ts_sampler **out) {
  if (out) *out = NULL;
  if (!cfg || !src || !out) return ts_error_set(TS_EINVAL, "ts_sampler_create: NULL argument");
  if ((unsigned)cfg->kind > TS_SAMPLER_STRATIFIED)
    return ts_error_set(TS_EINVAL, "ts_sampler_create: unknown sampler kind %d", (int)cfg->kind);
  int S = cfg->num_shards == 0 ? 1 : cfg->num_shards;
  if (S < 0 || cfg->shard_id < 0 || cfg->shard_id >= S)
    return ts_error_set(TS_EINVAL, "%s sampler: shard_id %d not in 0..%d (num_shards %d)",
                        kind_name(cfg->kind), cfg->shard_id, S - 1, cfg->num_shards);
  int64_t n = ts_source_len(src);
  if (n < 0)
    return ts_error_set(TS_EINVAL, "%s sampler: %s source has negative length %lld", kind_name(cfg->kind),
                        ts_source_kind(src), (long long)n);
  ts_sampler *s = calloc(1, sizeof *s);
  if (!s) return ts_error_set(TS_ENOMEM, "%s sampler: out of memory", kind_name(cfg->kind));
  s->cfg = *cfg;
  s->S = S;
  s->shard = cfg->shard_id;
  s->n = n;
  s->len = cfg->drop_last ? n / S : (n + S - 1) / S;

  if (cfg->kind == TS_SAMPLER_STRATIFIED && n > 0) {
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    if (!lab) goto oom;
    int64_t maxl = -1;
    for (int64_t i = 0; i < n; i++) {
      int64_t l = ts_source_label(src, i);
      if (l < 0 || l > INT32_MAX) {
        free(lab);
        ts_sampler_free(s);
        if (l < -1) /* an error code from the source: keep its message */
          return ts_error_wrap((int)l, "stratified sampler: label of sample %lld", (long long)i);
        return ts_error_set(TS_EINVAL, "stratified sampler: %s source sample %lld has label %lld "
                            "(class labels >= 0 are required)", ts_source_kind(src), (long long)i,
                            (long long)l);
      }
      lab[i] = (int32_t)l;
      if (l > maxl) maxl = l;
    }
    int nc = ts_source_num_classes(src);
    int64_t K = maxl + 1 > nc ? maxl + 1 : nc;
    if (K > (int64_t)1 << 24) {
      free(lab);
      ts_sampler_free(s);
      return ts_error_set(TS_ERANGE, "stratified sampler: %lld classes (at most 2^24)", (long long)K);
    }
    s->ncls = (int)K;
    s->cls_start = calloc((size_t)K + 1, sizeof *s->cls_start);
    s->by_class = malloc((size_t)n * sizeof *s->by_class);
    if (!s->cls_start || !s->by_class) {
      free(lab);
      goto oom;
    }
    for (int64_t i = 0; i < n; i++) s->cls_start[lab[i] + 1]++;
    for (int64_t c = 0; c < K; c++) s->cls_start[c + 1] += s->cls_start[c];
    int64_t *fill = malloc((size_t)K * sizeof *fill);
    if (!fill) {
      free(lab);
      goto oom;
    }
    memcpy(fill, s->cls_start, (size_t)K * sizeof *fill);
    for (int64_t i = 0; i < n; i++) s->by_class[fill[lab[i]]++] = i;
    free(fill);
    free(lab);
  }
  *out = s;
  return TS_OK;
oom:
  ts_sampler_free(s);
  return ts_error_set(TS_ENOMEM, "%s sampler: out of memory for %lld samples", kind_name(cfg->kind),
                      (long long)n);
}

void ts_sampler_free(ts_sampler *s) {
  if (!s) return;
  free(s->cls_start);
  free(s->by_class);
  free(s);
}

int64_t ts_sampler_len(const ts_sampler *s) { return s ? s->len : 0; }

/* Stratified: see docs/data-pipeline.md. Classes are laid end to end (class 0's shuffled list,
 * then class 1's, ...) and the whole sequence is dealt round-robin starting at a per-epoch
 * rotation r: position p of class c goes to shard (start_c + p + r) mod S. Each shard thus gets
 * floor(n_c/S) or ceil(n_c/S) of class c and floor(n/S) or ceil(n/S) in all; a shard one short
 * (padding) adds a sample of its most under-represented class, a shard one over (drop_last) drops
 * one of its most over-represented class, which keeps every class count in {floor, ceil}. */
static int stratified_indices(ts_sampler *s, int64_t epoch, int64_t *out) {
  const int64_t S = s->S, n = s->n, L = s->len;
  const int K = s->ncls;
  const int shuffle = s->cfg.shuffle;
  const uint64_t ep = (uint64_t)epoch;
  int64_t *list = malloc((size_t)n * sizeof *list);  /* class lists, shuffled */
  int64_t *k0 = malloc((size_t)K * sizeof *k0);      /* first list position of this shard */
  int64_t *cnt = malloc((size_t)K * sizeof *cnt);    /* samples of class c this shard gets */
  if (!list || !k0 || !cnt) {
    free(list);
    free(k0);
    free(cnt);
    return ts_error_set(TS_ENOMEM, "stratified sampler: out of memory");
  }
  memcpy(list, s->by_class, (size_t)n * sizeof *list);
  int64_t r = 0;
  if (shuffle) {
    ts_philox_out o = ts_philox4x32(stream_key(s->cfg.seed, STREAM_ROT), ep, 0);
    r = (int64_t)bounded64((uint64_t)o.v[0] | (uint64_t)o.v[1] << 32, (uint64_t)S);
  }
  int64_t total = 0;
  for (int c = 0; c < K; c++) {
    int64_t st = s->cls_start[c], nc = s->cls_start[c + 1] - st;
    if (shuffle && nc > 1)
      shuffle_i64(list + st, nc, stream_key(s->cfg.seed ^ ((uint64_t)c << 32), STREAM_CLASS), ep);
    int64_t off = (st + r) % S;             /* shard that receives position 0 of class c */
    k0[c] = ((int64_t)s->shard - off + S) % S;
    cnt[c] = nc > k0[c] ? (nc - k0[c] + S - 1) / S : 0;
    total += cnt[c];
  }
  int pad_c = -1, drop_c = -1;
  if (total < L) { /* most under-represented class: max n_c - S*cnt_c (> 0 exists) */
    int64_t best = 0;
    for (int c = 0; c < K; c++) {
      int64_t nc = s->cls_start[c + 1] - s->cls_start[c], d = nc - S * cnt[c];
      if (d > best) best = d, pad_c = c;
    }
  } else if (total > L) { /* most over-represented: max S*cnt_c - n_c (> 0 exists) */
    int64_t best = 0;
    for (int c = 0; c < K; c++) {
      int64_t nc = s->cls_start[c + 1] - s->cls_start[c], e = S * cnt[c] - nc;
      if (e > best) best = e, drop_c = c;
    }
  }
  int64_t m = 0;
  for (int c = 0; c < K; c++) {
    int64_t st = s->cls_start[c], nc = s->cls_start[c + 1] - st;
    int64_t take = cnt[c] - (c == drop_c);
    for (int64_t j = 0; j < take; j++) out[m++] = list[st + k0[c] + j * S];
    /* a position of another shard: (k0 + 1) mod n_c is never ≡ k0 (mod S) for a padded class */
    if (c == pad_c) out[m++] = list[st + (k0[c] + 1) % nc];
  }
  free(list);
  free(k0);
  free(cnt);
  if (m != L) /* cannot happen: see the comment above */
    return ts_error_set(TS_EINVAL, "stratified sampler: internal error, %lld samples for %lld",
                        (long long)m, (long long)L);
  if (shuffle) {
    shuffle_i64(out, L, stream_key(s->cfg.seed ^ ((uint64_t)s->shard << 32), STREAM_SHARD), ep);
  }
  return TS_OK;
}

int ts_sampler_indices(ts_sampler *s, int64_t epoch, int64_t *out) {
  if (!s || (!out && s->len)) return ts_error_set(TS_EINVAL, "ts_sampler_indices: NULL argument");
  if (epoch < 0)
    return ts_error_set(TS_EINVAL, "%s sampler: negative epoch %lld", kind_name(s->cfg.kind), (long long)epoch);
  const int64_t S = s->S, n = s->n, L = s->len, shard = s->shard;
  if (L == 0) return TS_OK;
  switch (s->cfg.kind) {
    case TS_SAMPLER_SEQUENTIAL: /* contiguous blocks of the (wrapped) sequence 0..n-1 */
      for (int64_t k = 0; k < L; k++) out[k] = (shard * L + k) % n;
      return TS_OK;
    case TS_SAMPLER_STRATIFIED:
      return stratified_indices(s, epoch, out);
    case TS_SAMPLER_RANDOM:
    case TS_SAMPLER_DISTRIBUTED: {
      int shuffle = s->cfg.kind == TS_SAMPLER_RANDOM || s->cfg.shuffle;
      if (!shuffle) { /* strided positions of 0..n-1, wrapped */
        for (int64_t k = 0; k < L; k++) out[k] = (shard + k * S) % n;
        return TS_OK;
      }
      int64_t *perm = S == 1 ? out : malloc((size_t)n * sizeof *perm);
      if (!perm) return ts_error_set(TS_ENOMEM, "%s sampler: out of memory", kind_name(s->cfg.kind));
      for (int64_t i = 0; i < n; i++) perm[i] = i;
      shuffle_i64(perm, n, stream_key(s->cfg.seed, STREAM_PERM), (uint64_t)epoch);
      if (perm != out) {
        for (int64_t k = 0; k < L; k++) out[k] = perm[(shard + k * S) % n];
        free(perm);
      }
      return TS_OK;
    }
  }
  return ts_error_set(TS_EINVAL, "ts_sampler_indices: unknown sampler kind %d", (int)s->cfg.kind);
}
