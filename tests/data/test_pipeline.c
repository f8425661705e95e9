/* The pipeline: bit-identical batches for 0/1/2/4 workers and any prefetch, equal to a by-hand
 * evaluation of sampler + transforms; shuffle buffer determinism; drop_remainder; repeat;
 * ts_pipeline_seek equal to a fresh run; a failing sample reported with its index at the same
 * batch whatever the workers; stacking errors; targets; ts_pipeline_free mid-epoch. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/transform_internal.h"
#include "tessera/data.h"
#include "test_util.h"

/* ---- a callback source: u8 (H,W,3) images whose pixels come from the index ---- */
typedef struct {
  int64_t n;
  int h, w;
  int64_t fail_at;   /* get() fails for this index (-1: never) */
  int64_t odd_at;    /* this index has a different shape (-1: never) */
  int as_index;      /* data = i32 (1) holding the index, instead of an image */
  int with_target;   /* target = i32 (4) */
  int sleep_us;      /* per get() */
} src_cfg;

static int64_t s_len(void *self) { return ((src_cfg *)self)->n; }
static int64_t s_label(void *self, int64_t i) { return (i * 7) % 10; }
static int s_ncls(void *self) { return 10; }
static int s_get(void *self, int64_t i, ts_sample *out) {
  src_cfg *c = self;
  if (c->sleep_us) usleep((useconds_t)c->sleep_us);
  if (i == c->fail_at) return ts_error_set(TS_EIO, "test source: sample %lld is unreadable", (long long)i);
  int rc;
  if (c->as_index) {
    rc = ts_tensor_init(&out->data, TS_I32, ts_shape1(1));
    if (rc) return rc;
    ((int32_t *)out->data.data)[0] = (int32_t)i;
  } else {
    int h = i == c->odd_at ? c->h + 1 : c->h;
    rc = ts_tensor_init(&out->data, TS_U8, ts_shape3(h, c->w, 3));
    if (rc) return rc;
    uint8_t *p = out->data.data;
    for (int64_t k = 0; k < (int64_t)h * c->w * 3; k++) p[k] = (uint8_t)(ts_philox4x32((uint64_t)i, 0, (uint64_t)k).v[0]);
  }
  if (c->with_target) {
    rc = ts_tensor_init(&out->target, TS_I32, ts_shape1(4));
    if (rc) return rc;
    for (int k = 0; k < 4; k++) ((int32_t *)out->target.data)[k] = (int32_t)(i * 4 + k);
  }
  out->label = s_label(self, i);
  return TS_OK;
}

static ts_source *make_source(src_cfg *c) {
  ts_source_vtable vt = {"test", s_len, s_get, s_label, s_ncls, NULL, NULL};
  ts_source *s = NULL;
  CHECK_OK(ts_source_create(&vt, c, &s));
  return s;
}

static const float MEAN[3] = {0.49f, 0.48f, 0.45f}, STD[3] = {0.25f, 0.24f, 0.26f};
static ts_transform TF[6];
static void init_tf(void) {
  TF[0] = ts_tf_random_crop(8, 8, 2);
  TF[1] = ts_tf_hflip(0.5f);
  TF[2] = ts_tf_to_float(1.0f / 255);
  TF[3] = ts_tf_normalize(3, MEAN, STD);
  TF[4] = ts_tf_hwc_to_chw();
  TF[5] = ts_tf_random_erasing(0.5f);
}

/* Every batch of a run, flattened: per batch (epoch, index, size), labels, data bytes. */
typedef struct {
  uint8_t *buf;
  size_t len, cap;
  int64_t nbatches;
} stream;

static void put(stream *s, const void *p, size_t n) {
  if (s->len + n > s->cap) {
    s->cap = (s->len + n) * 2;
    s->buf = realloc(s->buf, s->cap);
  }
  memcpy(s->buf + s->len, p, n);
  s->len += n;
}

static void put_batch(stream *s, const ts_batch *b) {
  int64_t head[3] = {b->epoch, b->index, b->size};
  put(s, head, sizeof head);
  put(s, b->labels.data, ts_tensor_nbytes(&b->labels));
  int64_t shp[TS_MAX_DIMS + 1] = {b->data.shape.ndim};
  for (int d = 0; d < b->data.shape.ndim; d++) shp[d + 1] = b->data.shape.dims[d];
  put(s, shp, sizeof shp);
  put(s, b->data.data, ts_tensor_nbytes(&b->data));
  if (b->target.data) put(s, b->target.data, ts_tensor_nbytes(&b->target));
  s->nbatches++;
}

/* Runs p to the end (or max batches); returns the stream and the final status. */
static int run(ts_pipeline *p, stream *s, int64_t max) {
  memset(s, 0, sizeof *s);
  for (int64_t k = 0; k < max; k++) {
    ts_batch b;
    int rc = ts_pipeline_next(p, &b);
    if (rc) return rc;
    if (b.size == 0) break;
    put_batch(s, &b);
  }
  return TS_OK;
}

static ts_pipeline_config base_config(ts_source *src) {
  ts_pipeline_config c = ts_pipeline_config_default();
  c.source = src;
  c.transforms = TF;
  c.ntransforms = 6;
  c.batch_size = 16;
  c.epochs = 3;
  c.seed = 1234;
  c.sampler.kind = TS_SAMPLER_DISTRIBUTED;
  c.sampler.num_shards = 2;
  c.sampler.shard_id = 1;
  return c;
}

static int same_stream(const stream *a, const stream *b) {
  return a->len == b->len && a->nbatches == b->nbatches && memcmp(a->buf, b->buf, a->len) == 0;
}

static void test_workers_identical(ts_source *src, const src_cfg *sc) {
  for (int sb = 0; sb <= 1; sb++) {
    stream ref;
    memset(&ref, 0, sizeof ref);
    int workers[] = {0, 1, 2, 4, 4, 2};
    int prefetch[] = {2, 2, 2, 2, 1, 6};
    for (int w = 0; w < 6; w++) {
      ts_pipeline_config c = base_config(src);
      c.num_workers = workers[w];
      c.prefetch = prefetch[w];
      c.shuffle_buffer = sb ? 37 : 0;
      ts_pipeline *p = NULL;
      CHECK_OK(ts_pipeline_create(&c, &p));
      if (!p) continue;
      stream s;
      CHECK_OK(run(p, &s, 1000));
      /* 203 samples over 2 shards, padded: 102 per shard, batches of 16: 6 full + 6 */
      CHECK(ts_pipeline_batches_per_epoch(p) == 7);
      CHECK_MSG(s.nbatches == 21, "%lld batches", (long long)s.nbatches);
      if (w == 0) ref = s;
      else {
        CHECK_MSG(same_stream(&s, &ref), "shuffle_buffer %d: workers %d prefetch %d differ from workers 0",
                  c.shuffle_buffer, workers[w], prefetch[w]);
        free(s.buf);
      }
      ts_pipeline_free(p);
    }
    if (!sb) { /* workers 0 against a by-hand evaluation: sampler + ts_transforms_apply */
      ts_pipeline_config c = base_config(src);
      ts_sampler_config smc = c.sampler;
      smc.seed = c.seed;
      ts_sampler *sm;
      CHECK_OK(ts_sampler_create(&smc, src, &sm));
      int64_t idx[102];
      stream hand;
      memset(&hand, 0, sizeof hand);
      for (int64_t e = 0; e < 3; e++) {
        CHECK_OK(ts_sampler_indices(sm, e, idx));
        for (int64_t b = 0; b < 7; b++) {
          int n = b < 6 ? 16 : 6;
          int64_t head[3] = {e, b, n};
          put(&hand, head, sizeof head);
          for (int k = 0; k < n; k++) {
            int32_t l = (int32_t)((idx[b * 16 + k] * 7) % 10);
            put(&hand, &l, 4);
          }
          int64_t shp[TS_MAX_DIMS + 1] = {4, n, 3, 8, 8};
          put(&hand, shp, sizeof shp);
          for (int k = 0; k < n; k++) {
            ts_sample smp;
            CHECK_OK(ts_source_get(src, idx[b * 16 + k], &smp));
            CHECK_OK(ts_transforms_apply(TF, 6, &smp, ts__sample_key(c.seed, e, idx[b * 16 + k])));
            put(&hand, smp.data.data, ts_tensor_nbytes(&smp.data));
            ts_sample_free(&smp);
          }
        }
      }
      CHECK_MSG(hand.len == ref.len && memcmp(hand.buf, ref.buf, ref.len) == 0,
                "pipeline output differs from sampler + transforms by hand");
      free(hand.buf);
      ts_sampler_free(sm);
    }
    free(ref.buf);
  }
  (void)sc;
}

static void test_shuffle_buffer(void) {
  src_cfg sc = {100, 0, 0, -1, -1, 1, 0, 0}; /* data = the index */
  ts_source *src = make_source(&sc);
  ts_pipeline_config c = ts_pipeline_config_default();
  c.source = src;
  c.batch_size = 10;
  c.epochs = 2;
  c.seed = 5;
  stream plain, sh1, sh2, sh3, sh4;
  ts_pipeline *p;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(run(p, &plain, 1000));
  ts_pipeline_free(p);
  c.shuffle_buffer = 16;
  c.num_workers = 2;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(run(p, &sh1, 1000));
  ts_pipeline_free(p);
  c.num_workers = 0;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(run(p, &sh2, 1000));
  ts_pipeline_free(p);
  c.seed = 6;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(run(p, &sh3, 1000));
  ts_pipeline_free(p);
  c.seed = 5;
  c.shuffle_buffer = 1; /* a buffer of one is the identity */
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(run(p, &sh4, 1000));
  ts_pipeline_free(p);
  CHECK(same_stream(&sh1, &sh2));
  CHECK(!same_stream(&sh1, &plain));
  CHECK(!same_stream(&sh1, &sh3));
  CHECK(same_stream(&sh4, &plain));
  /* each epoch holds every sample once; the two epochs differ; a sample leaves the buffer no
   * earlier than buffer size - 1 positions before its own */
  const size_t per = 3 * 8 + 10 * 4 + sizeof(int64_t) * (TS_MAX_DIMS + 1) + 10 * 4;
  CHECK(sh1.nbatches == 20 && sh1.len == 20 * per);
  int32_t order[2][100];
  for (int b = 0; b < 20 && sh1.len == 20 * per; b++)
    memcpy(&order[b / 10][(b % 10) * 10], sh1.buf + b * per + 3 * 8 + 40 + sizeof(int64_t) * (TS_MAX_DIMS + 1), 40);
  int seen[2][100] = {{0}}, early = 0, same = 0;
  for (int e = 0; e < 2; e++)
    for (int k = 0; k < 100; k++) {
      int v = order[e][k];
      if (v >= 0 && v < 100) seen[e][v]++;
      if (v > k + 15) early++;
      same += order[0][k] == order[1][k];
    }
  int ok = 1;
  for (int e = 0; e < 2; e++)
    for (int v = 0; v < 100; v++) ok &= seen[e][v] == 1;
  CHECK_MSG(ok && early == 0, "shuffle buffer lost or duplicated samples (ok %d) or emitted %d early", ok, early);
  CHECK_MSG(same < 20, "the two epochs share %d positions", same);
  free(plain.buf), free(sh1.buf), free(sh2.buf), free(sh3.buf), free(sh4.buf);
  ts_source_free(src);
}

static void test_drop_repeat(ts_source *src) {
  for (int drop = 0; drop <= 1; drop++) {
    ts_pipeline_config c = base_config(src);
    c.drop_remainder = drop;
    c.num_workers = 2;
    c.epochs = 2;
    ts_pipeline *p;
    CHECK_OK(ts_pipeline_create(&c, &p));
    int64_t bpe = ts_pipeline_batches_per_epoch(p);
    CHECK(bpe == (drop ? 6 : 7));
    for (int64_t e = 0; e < 2; e++)
      for (int64_t i = 0; i < bpe; i++) {
        ts_batch b;
        CHECK_OK(ts_pipeline_next(p, &b));
        int expect = (!drop && i == 6) ? 6 : 16;
        CHECK_MSG(b.size == expect && b.epoch == e && b.index == i, "batch (%lld,%lld): size %d epoch %lld index %lld",
                  (long long)e, (long long)i, b.size, (long long)b.epoch, (long long)b.index);
        CHECK(b.data.shape.ndim == 4 && b.data.shape.dims[0] == b.size && b.data.shape.dims[1] == 3 &&
              b.data.dtype == TS_F32 && b.labels.dtype == TS_I32 && b.labels.shape.dims[0] == b.size);
      }
    ts_batch end;
    CHECK_OK(ts_pipeline_next(p, &end));
    CHECK(end.size == 0);
    CHECK_OK(ts_pipeline_next(p, &end));
    CHECK(end.size == 0);
    ts_pipeline_free(p);
  }
  /* epochs = -1: forever (take 5 epochs' worth); epochs = 0: nothing */
  ts_pipeline_config c = base_config(src);
  c.epochs = -1;
  c.num_workers = 1;
  ts_pipeline *p;
  CHECK_OK(ts_pipeline_create(&c, &p));
  ts_batch b;
  for (int k = 0; k < 35; k++) CHECK_OK(ts_pipeline_next(p, &b));
  CHECK(b.size == 6 && b.epoch == 4 && b.index == 6);
  ts_pipeline_free(p);
  c.epochs = 0;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK_OK(ts_pipeline_next(p, &b));
  CHECK(b.size == 0);
  ts_pipeline_free(p);
}

static void test_seek(ts_source *src) {
  ts_pipeline_config c = base_config(src);
  c.shuffle_buffer = 20;
  c.num_workers = 2;
  ts_pipeline *p;
  CHECK_OK(ts_pipeline_create(&c, &p));
  stream full;
  CHECK_OK(run(p, &full, 1000));
  ts_pipeline_free(p);
  /* byte offset of every batch in the full stream */
  size_t off[22];
  int64_t nb = 0;
  for (size_t pos = 0; pos < full.len && nb < 21;) {
    off[nb++] = pos;
    int64_t head[3];
    memcpy(head, full.buf + pos, sizeof head);
    pos += sizeof head + (size_t)head[2] * 4 + sizeof(int64_t) * (TS_MAX_DIMS + 1) + (size_t)head[2] * 3 * 8 * 8 * 4;
  }
  off[nb] = full.len;
  CHECK(nb == 21);
  int64_t points[][2] = {{0, 0}, {0, 3}, {1, 0}, {1, 6}, {2, 2}, {0, 7}, {2, 7}};
  for (int w = 0; w < 2; w++)
    for (size_t k = 0; k < sizeof points / sizeof *points; k++) {
      c.num_workers = w ? 4 : 0;
      CHECK_OK(ts_pipeline_create(&c, &p));
      ts_batch b;
      for (int j = 0; j < 3 + (int)k; j++) CHECK_OK(ts_pipeline_next(p, &b)); /* consume some, then seek */
      CHECK_OK(ts_pipeline_seek(p, points[k][0], points[k][1]));
      stream rest;
      CHECK_OK(run(p, &rest, 1000));
      int64_t first = points[k][0] * 7 + points[k][1];
      size_t len = full.len - off[first];
      CHECK_MSG(rest.len == len && (len == 0 || memcmp(rest.buf, full.buf + off[first], len) == 0),
                "workers %d: seek(%lld, %lld) differs from the fresh run", c.num_workers, (long long)points[k][0],
                (long long)points[k][1]);
      free(rest.buf);
      ts_pipeline_free(p);
    }
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK(ts_pipeline_seek(p, 0, 8) == TS_ERANGE);
  CHECK(ts_pipeline_seek(p, 3, 1) == TS_ERANGE);
  CHECK(ts_pipeline_seek(p, -1, 0) == TS_ERANGE);
  ts_pipeline_free(p);
  free(full.buf);
}

static void test_errors(void) {
  src_cfg sc = {203, 8, 8, 77, -1, 0, 0, 0};
  ts_source *src = make_source(&sc);
  int64_t at_batch[3] = {-1, -1, -1};
  int wk[3] = {0, 2, 4};
  for (int w = 0; w < 3; w++) {
    ts_pipeline_config c = base_config(src);
    c.sampler.num_shards = 1;
    c.sampler.shard_id = 0;
    c.sampler.kind = TS_SAMPLER_RANDOM;
    c.num_workers = wk[w];
    ts_pipeline *p;
    CHECK_OK(ts_pipeline_create(&c, &p));
    ts_batch b;
    int rc = TS_OK;
    int64_t k = 0;
    for (; k < 100; k++) {
      rc = ts_pipeline_next(p, &b);
      if (rc || b.size == 0) break;
    }
    at_batch[w] = k;
    CHECK_MSG(rc == TS_EIO, "workers %d: status %d after %lld batches", wk[w], rc, (long long)k);
    const char *m = ts_last_error();
    CHECK_MSG(strstr(m, "sample 77 (epoch 0") && strstr(m, "unreadable"), "message: %s", m);
    CHECK(ts_pipeline_next(p, &b) == TS_EIO); /* sticky */
    CHECK(strstr(ts_last_error(), "sample 77") != NULL);
    /* seeking past the bad batch resumes */
    CHECK_OK(ts_pipeline_seek(p, 0, k + 1));
    int rc2 = ts_pipeline_next(p, &b);
    CHECK(rc2 == TS_OK || rc2 == TS_EIO); /* 77 may come up again in epoch 1 */
    ts_pipeline_free(p);
  }
  CHECK_MSG(at_batch[0] == at_batch[1] && at_batch[1] == at_batch[2], "error at batch %lld / %lld / %lld",
            (long long)at_batch[0], (long long)at_batch[1], (long long)at_batch[2]);
  ts_source_free(src);

  /* samples that cannot be stacked */
  src_cfg so = {40, 8, 8, -1, 21, 0, 0, 0};
  src = make_source(&so);
  ts_pipeline_config c = ts_pipeline_config_default();
  c.source = src;
  c.batch_size = 8;
  c.num_workers = 2;
  ts_pipeline *p;
  CHECK_OK(ts_pipeline_create(&c, &p));
  ts_batch b;
  CHECK_OK(ts_pipeline_next(p, &b));
  CHECK_OK(ts_pipeline_next(p, &b));
  CHECK(ts_pipeline_next(p, &b) == TS_ESHAPE);
  CHECK_MSG(strstr(ts_last_error(), "sample 21") && strstr(ts_last_error(), "(9,8,3)"), "%s", ts_last_error());
  ts_pipeline_free(p);
  ts_source_free(src);

  /* bad configurations */
  CHECK(ts_pipeline_create(&c, NULL) == TS_EINVAL);
  c.source = NULL;
  CHECK(ts_pipeline_create(&c, &p) == TS_EINVAL && p == NULL);
}

static void test_targets_stratified(void) {
  src_cfg sc = {50, 4, 4, -1, -1, 0, 1, 0};
  ts_source *src = make_source(&sc);
  ts_pipeline_config c = ts_pipeline_config_default();
  c.source = src;
  c.batch_size = 6;
  c.num_workers = 2;
  c.sampler.kind = TS_SAMPLER_STRATIFIED;
  c.sampler.num_shards = 3;
  c.sampler.shard_id = 2;
  ts_pipeline *p;
  CHECK_OK(ts_pipeline_create(&c, &p));
  CHECK(ts_pipeline_batches_per_epoch(p) == 3); /* ceil(50/3) = 17 -> 6, 6, 5 */
  ts_batch b;
  int total = 0;
  while (ts_pipeline_next(p, &b) == TS_OK && b.size) {
    CHECK(b.target.data && b.target.shape.ndim == 2 && b.target.shape.dims[0] == b.size && b.target.shape.dims[1] == 4);
    CHECK(b.data.dtype == TS_U8 && b.data.shape.ndim == 4);
    for (int i = 0; i < b.size; i++) {
      int32_t *t = (int32_t *)b.target.data + 4 * i;
      CHECK(t[1] == t[0] + 1 && ((int32_t *)b.labels.data)[i] == ((t[0] / 4) * 7) % 10);
    }
    total += b.size;
  }
  CHECK(total == 17);
  ts_pipeline_free(p);
  ts_source_free(src);
}

static void test_free_mid_epoch(void) {
  src_cfg sc = {400, 8, 8, -1, -1, 0, 0, 500}; /* 0.5 ms per sample */
  ts_source *src = make_source(&sc);
  for (int w = 1; w <= 4; w *= 2) {
    ts_pipeline_config c = base_config(src);
    c.num_workers = w;
    c.prefetch = 4;
    c.epochs = -1;
    ts_pipeline *p;
    CHECK_OK(ts_pipeline_create(&c, &p));
    ts_batch b;
    CHECK_OK(ts_pipeline_next(p, &b));
    CHECK_OK(ts_pipeline_next(p, &b));
    double t0 = ts_time_now();
    ts_pipeline_free(p);
    double dt = ts_time_now() - t0;
    CHECK_MSG(dt < 0.5, "free with %d busy workers took %.3f s", w, dt);
    CHECK_OK(ts_pipeline_create(&c, &p)); /* and right after creation */
    ts_pipeline_free(p);
  }
  ts_source_free(src);
}

int main(void) {
  double t0 = ts_time_now();
  init_tf();
  src_cfg sc = {203, 8, 8, -1, -1, 0, 0, 0};
  ts_source *src = make_source(&sc);
  test_workers_identical(src, &sc);
  test_shuffle_buffer();
  test_drop_repeat(src);
  test_seek(src);
  test_errors();
  test_targets_stratified();
  test_free_mid_epoch();
  ts_source_free(src);
  printf("test_pipeline: %.2f s\n", ts_time_now() - t0);
  return ts_test_finish("test_pipeline");
}
