/* Samplers: for n in {60000, 10, 7, 1003} over 1..8 shards, padded and dropped, every kind:
 * equal per-shard counts, the union of the shards covers every sample with duplicates exactly
 * where padding says (total - n of them) or losses exactly where dropping says (n - total);
 * distributed = strided positions of one global (optionally shuffled) order, as torch's
 * DistributedSampler; random = a permutation, reshuffled per epoch, reproducible from the seed;
 * stratified = every shard's count of class c is floor(n_c/S) or ceil(n_c/S) (within one sample
 * of the exact share), for balanced and unbalanced labels. */
#include <stdlib.h>
#include <string.h>

#include "tessera/data.h"
#include "test_util.h"

typedef struct {
  int64_t n;
  const int32_t *labels; /* NULL: no labels */
  int ncls;
} fake;

static int64_t f_len(void *self) { return ((fake *)self)->n; }
static int f_get(void *self, int64_t i, ts_sample *out) {
  fake *f = self;
  int rc = ts_tensor_init(&out->data, TS_U8, ts_shape1(1));
  if (rc) return rc;
  out->label = f->labels ? f->labels[i] : -1;
  return TS_OK;
}
static int64_t f_label(void *self, int64_t i) {
  fake *f = self;
  return f->labels ? f->labels[i] : -1;
}
static int f_ncls(void *self) { return ((fake *)self)->ncls; }

static ts_source *make_source(fake *f) {
  ts_source_vtable vt = {"fake", f_len, f_get, f_label, f_ncls, NULL, NULL};
  ts_source *s = NULL;
  CHECK_OK(ts_source_create(&vt, f, &s));
  return s;
}

static const char *kname[] = {"sequential", "random", "distributed", "stratified"};

/* Runs all S shards of one configuration for one epoch; checks counts and coverage. Returns the
 * concatenated indices (shard-major) in *all (caller frees) . */
static void check_shards(ts_source *src, const fake *f, ts_sampler_kind kind, int shuffle, int S, int drop,
                         uint64_t seed, int64_t epoch, int64_t **all_out) {
  const int64_t n = f->n, L = drop ? n / S : (n + S - 1) / S;
  int64_t *all = malloc(sizeof *all * (size_t)(L * S + 1));
  int *count = calloc((size_t)n + 1, sizeof *count);
  int64_t *cls_n = NULL, *cls_c = NULL;
  if (kind == TS_SAMPLER_STRATIFIED) {
    cls_n = calloc((size_t)f->ncls, sizeof *cls_n);
    cls_c = calloc((size_t)f->ncls, sizeof *cls_c);
    for (int64_t i = 0; i < n; i++) cls_n[f->labels[i]]++;
  }
  int bad_len = 0, bad_idx = 0, bad_strat = 0;
  for (int sh = 0; sh < S; sh++) {
    ts_sampler_config c = {kind, seed, shuffle, S, sh, drop};
    ts_sampler *sm = NULL;
    CHECK_OK(ts_sampler_create(&c, src, &sm));
    if (!sm) continue;
    if (ts_sampler_len(sm) != L) bad_len++;
    int64_t *out = all + (int64_t)sh * L;
    CHECK_OK(ts_sampler_indices(sm, epoch, out));
    if (cls_c) memset(cls_c, 0, sizeof *cls_c * (size_t)f->ncls);
    for (int64_t k = 0; k < L; k++) {
      if (out[k] < 0 || out[k] >= n) {
        bad_idx++;
        continue;
      }
      count[out[k]]++;
      if (cls_c) cls_c[f->labels[out[k]]]++;
    }
    if (cls_c)
      for (int c2 = 0; c2 < f->ncls; c2++) {
        int64_t lo = cls_n[c2] / S, hi = (cls_n[c2] + S - 1) / S;
        if (cls_c[c2] < lo || cls_c[c2] > hi) {
          if (bad_strat++ < 3)
            fprintf(stderr, "stratified n=%lld S=%d drop=%d shard %d: class %d has %lld, exact share %.3f\n",
                    (long long)n, S, drop, sh, c2, (long long)cls_c[c2], (double)cls_n[c2] / S);
        }
      }
    ts_sampler_free(sm);
  }
  int64_t dups = 0, lost = 0;
  for (int64_t i = 0; i < n; i++) {
    if (count[i] == 0) lost++;
    else dups += count[i] - 1;
  }
  CHECK_MSG(!bad_len && !bad_idx, "%s n=%lld S=%d drop=%d: %d shards with a length other than %lld, %d bad indices",
            kname[kind], (long long)n, S, drop, bad_len, (long long)L, bad_idx);
  if (drop)
    CHECK_MSG(dups == 0 && lost == n - L * S, "%s n=%lld S=%d drop: %lld duplicates, %lld lost (expected 0, %lld)",
              kname[kind], (long long)n, S, (long long)dups, (long long)lost, (long long)(n - L * S));
  else
    CHECK_MSG(lost == 0 && dups == L * S - n, "%s n=%lld S=%d pad: %lld lost, %lld duplicates (expected 0, %lld)",
              kname[kind], (long long)n, S, (long long)lost, (long long)dups, (long long)(L * S - n));
  CHECK_MSG(bad_strat == 0, "stratified n=%lld S=%d drop=%d: %d class counts outside {floor, ceil} of n_c/S",
            (long long)n, S, drop, bad_strat);
  free(count);
  free(cls_n);
  free(cls_c);
  if (all_out) *all_out = all;
  else free(all);
}

static int is_perm(const int64_t *a, int64_t n) {
  char *seen = calloc((size_t)n + 1, 1);
  int ok = 1;
  for (int64_t i = 0; i < n && ok; i++) {
    if (a[i] < 0 || a[i] >= n || seen[a[i]]) ok = 0;
    else seen[a[i]] = 1;
  }
  free(seen);
  return ok;
}

static void test_sizes(void) {
  const int64_t sizes[] = {60000, 10, 7, 1003};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    const int64_t n = sizes[si];
    int32_t *bal = malloc(sizeof *bal * (size_t)n), *unb = malloc(sizeof *unb * (size_t)n);
    /* balanced: i % 10; unbalanced: class c gets about half of what c-1 gets (7 classes), in a
     * scrambled order */
    for (int64_t i = 0; i < n; i++) {
      bal[i] = (int32_t)(i % 10);
      uint32_t r = ts_philox4x32(77, 0, (uint64_t)i).v[0];
      int c = 0;
      while (c < 6 && (r & (1u << c))) c++;
      unb[i] = c;
    }
    fake fb = {n, bal, 10}, fu = {n, unb, 7}, fn = {n, NULL, 0};
    ts_source *sb = make_source(&fb), *su = make_source(&fu), *sn = make_source(&fn);
    for (int S = 1; S <= 8; S++) {
      for (int drop = 0; drop <= 1; drop++) {
        int64_t *seq, *dist, *dist_sh, *rnd;
        const int64_t L = drop ? n / S : (n + S - 1) / S;
        check_shards(sn, &fn, TS_SAMPLER_SEQUENTIAL, 0, S, drop, 1, 0, &seq);
        check_shards(sn, &fn, TS_SAMPLER_DISTRIBUTED, 0, S, drop, 1, 0, &dist);
        check_shards(sn, &fn, TS_SAMPLER_DISTRIBUTED, 1, S, drop, 5, 3, &dist_sh);
        check_shards(sn, &fn, TS_SAMPLER_RANDOM, 0, S, drop, 5, 3, &rnd);
        check_shards(sb, &fb, TS_SAMPLER_STRATIFIED, 1, S, drop, 9, 0, NULL);
        check_shards(su, &fu, TS_SAMPLER_STRATIFIED, 1, S, drop, 9, 1, NULL);
        check_shards(su, &fu, TS_SAMPLER_STRATIFIED, 0, S, drop, 9, 0, NULL);
        /* the layouts: sequential = contiguous blocks, distributed = strided positions of the
         * global order, the global order of a shuffled distributed sampler = the random sampler's
         * permutation (as DistributedSampler = randperm + stride) */
        ts_sampler_config one = {TS_SAMPLER_RANDOM, 5, 1, 1, 0, 0};
        ts_sampler *g = NULL;
        CHECK_OK(ts_sampler_create(&one, sn, &g));
        int64_t *perm = malloc(sizeof *perm * (size_t)n);
        CHECK_OK(ts_sampler_indices(g, 3, perm));
        CHECK(is_perm(perm, n));
        ts_sampler_free(g);
        int bad = 0;
        for (int sh = 0; sh < S; sh++)
          for (int64_t k = 0; k < L; k++) {
            bad += seq[sh * L + k] != (sh * L + k) % n;
            bad += dist[sh * L + k] != (sh + k * S) % n;
            bad += dist_sh[sh * L + k] != perm[(sh + k * S) % n];
            bad += rnd[sh * L + k] != dist_sh[sh * L + k]; /* random with shards = shuffled distributed */
          }
        CHECK_MSG(bad == 0, "n=%lld S=%d drop=%d: %d indices not where the layout says", (long long)n, S, drop, bad);
        free(perm);
        free(seq);
        free(dist);
        free(dist_sh);
        free(rnd);
      }
    }
    ts_source_free(sb);
    ts_source_free(su);
    ts_source_free(sn);
    free(bal);
    free(unb);
  }
}

static void test_random(void) {
  const int64_t n = 1003;
  fake f = {n, NULL, 0};
  ts_source *src = make_source(&f);
  ts_sampler_config c = {TS_SAMPLER_RANDOM, 42, 0, 1, 0, 0};
  ts_sampler *a, *b, *d;
  CHECK_OK(ts_sampler_create(&c, src, &a));
  CHECK_OK(ts_sampler_create(&c, src, &b));
  c.seed = 43;
  CHECK_OK(ts_sampler_create(&c, src, &d));
  int64_t *e0 = malloc(8 * n), *e1 = malloc(8 * n), *e0b = malloc(8 * n), *s43 = malloc(8 * n);
  CHECK_OK(ts_sampler_indices(a, 0, e0));
  CHECK_OK(ts_sampler_indices(a, 1, e1));
  CHECK_OK(ts_sampler_indices(b, 0, e0b));
  CHECK_OK(ts_sampler_indices(d, 0, s43));
  CHECK(is_perm(e0, n) && is_perm(e1, n));
  CHECK_MSG(memcmp(e0, e0b, 8 * n) == 0, "same seed, same epoch: different order");
  int same01 = 0, same_seed = 0, fixed = 0;
  for (int64_t i = 0; i < n; i++) {
    same01 += e0[i] == e1[i];
    same_seed += e0[i] == s43[i];
    fixed += e0[i] == i;
  }
  CHECK_MSG(same01 < 10 && same_seed < 10 && fixed < 10, "not reshuffled: %d same across epochs, %d across seeds, %d fixed points",
            same01, same_seed, fixed);
  /* epoch e's order does not depend on which epochs were asked before */
  CHECK_OK(ts_sampler_indices(b, 1, e0b));
  CHECK(memcmp(e1, e0b, 8 * n) == 0);
  /* uniformity: position of sample 0 over 2000 epochs of a 10-sample set */
  fake f10 = {10, NULL, 0};
  ts_source *s10 = make_source(&f10);
  ts_sampler *r10;
  CHECK_OK(ts_sampler_create(&c, s10, &r10));
  int hist[10] = {0};
  for (int64_t e = 0; e < 2000; e++) {
    int64_t o[10];
    CHECK_OK(ts_sampler_indices(r10, e, o));
    for (int k = 0; k < 10; k++)
      if (o[k] == 0) hist[k]++;
  }
  for (int k = 0; k < 10; k++) CHECK_MSG(hist[k] > 130 && hist[k] < 270, "sample 0 at position %d in %d of 2000 epochs", k, hist[k]);
  ts_sampler_free(r10);
  ts_source_free(s10);
  free(e0);
  free(e1);
  free(e0b);
  free(s43);
  ts_sampler_free(a);
  ts_sampler_free(b);
  ts_sampler_free(d);
  ts_source_free(src);
}

static void test_stratified_epochs(void) {
  /* reshuffled per epoch, identical for the same (seed, epoch), and each shard's class mix
   * stays within one sample across epochs */
  const int64_t n = 1003;
  int32_t lab[1003];
  for (int i = 0; i < n; i++) lab[i] = i < 700 ? 0 : i < 900 ? 1 : i < 990 ? 2 : 3;
  fake f = {n, lab, 4};
  ts_source *src = make_source(&f);
  ts_sampler_config c = {TS_SAMPLER_STRATIFIED, 11, 1, 4, 2, 0};
  ts_sampler *s;
  CHECK_OK(ts_sampler_create(&c, src, &s));
  int64_t L = ts_sampler_len(s);
  CHECK(L == 251);
  int64_t a[251], b[251], a2[251];
  CHECK_OK(ts_sampler_indices(s, 0, a));
  CHECK_OK(ts_sampler_indices(s, 1, b));
  CHECK_OK(ts_sampler_indices(s, 0, a2));
  CHECK(memcmp(a, a2, sizeof a) == 0);
  int same = 0;
  for (int k = 0; k < L; k++) same += a[k] == b[k];
  CHECK_MSG(same < 10, "stratified order not reshuffled: %d positions equal", same);
  for (int64_t e = 0; e < 6; e++) {
    for (int sh = 0; sh < 4; sh++) check_shards(src, &f, TS_SAMPLER_STRATIFIED, 1, 4, e & 1, 11, e, NULL);
  }
  ts_sampler_free(s);
  ts_source_free(src);
}

static void test_errors(void) {
  int32_t lab[5] = {0, 1, -1, 1, 0};
  fake f = {5, lab, 2};
  ts_source *src = make_source(&f);
  ts_sampler *s = NULL;
  ts_sampler_config c = {TS_SAMPLER_DISTRIBUTED, 0, 1, 4, 4, 0};
  CHECK(ts_sampler_create(&c, src, &s) == TS_EINVAL && s == NULL);
  CHECK(strstr(ts_last_error(), "shard_id 4") != NULL);
  c.kind = TS_SAMPLER_STRATIFIED;
  c.shard_id = 1;
  CHECK(ts_sampler_create(&c, src, &s) == TS_EINVAL && s == NULL);
  CHECK_MSG(strstr(ts_last_error(), "sample 2") != NULL, "%s", ts_last_error());
  /* zero-initialised config: sequential, one shard */
  ts_sampler_config z;
  memset(&z, 0, sizeof z);
  CHECK_OK(ts_sampler_create(&z, src, &s));
  CHECK(ts_sampler_len(s) == 5);
  int64_t o[5];
  CHECK_OK(ts_sampler_indices(s, 0, o));
  CHECK(o[0] == 0 && o[4] == 4);
  CHECK(ts_sampler_indices(s, -1, o) == TS_EINVAL);
  ts_sampler_free(s);
  /* an empty source: zero samples per epoch on every shard */
  fake e = {0, NULL, 0};
  ts_source *es = make_source(&e);
  ts_sampler_config d = {TS_SAMPLER_DISTRIBUTED, 0, 1, 3, 1, 0};
  CHECK_OK(ts_sampler_create(&d, es, &s));
  CHECK(ts_sampler_len(s) == 0);
  CHECK_OK(ts_sampler_indices(s, 0, NULL));
  ts_sampler_free(s);
  ts_source_free(es);
  ts_source_free(src);
}

int main(void) {
  double t0 = ts_time_now();
  test_sizes();
  test_random();
  test_stratified_epochs();
  test_errors();
  printf("test_sampler: %.2f s\n", ts_time_now() - t0);
  return ts_test_finish("test_sampler");
}
