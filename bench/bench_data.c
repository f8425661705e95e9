/* Images per second of the CIFAR-style input pipeline: random crop 32 pad 4, horizontal flip,
 * to_float(1/255), normalize, HWC->CHW, batches of 64, random sampler; with 1 and 2 workers,
 * from a synthetic CIFAR-shaped u8 source in memory and from Tessera record shards written from
 * it. One JSON line per configuration, with the ratio to what a ResNet-18 CIFAR training step
 * consumes (64 images per ~630 ms at 2 threads, measured on the reference machine: ~102 img/s;
 * the target is a ratio >= 10).
 *
 *   bench_data [--images N] [--epochs E] [--workers 1,2] [--no-records] [--step-ms 630]
 *
 * Numbers are wall-clock on whatever else the machine is doing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/data.h"

typedef struct {
  int64_t n;
  uint8_t *pix; /* n x 32 x 32 x 3 */
  uint8_t *lab;
} mem_src;

static int64_t m_len(void *self) { return ((mem_src *)self)->n; }
static int64_t m_label(void *self, int64_t i) { return ((mem_src *)self)->lab[i]; }
static int m_ncls(void *self) { return 10; }
static int m_get(void *self, int64_t i, ts_sample *out) {
  mem_src *m = self;
  int rc = ts_tensor_init(&out->data, TS_U8, ts_shape3(32, 32, 3));
  if (rc) return rc;
  memcpy(out->data.data, m->pix + (size_t)i * 3072, 3072);
  out->label = m->lab[i];
  return TS_OK;
}

static double run(ts_source *src, int workers, int64_t epochs, int64_t *images, double *first_ms) {
  static const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
  ts_transform tf[5] = {ts_tf_random_crop(32, 32, 4), ts_tf_hflip(0.5f), ts_tf_to_float(1.0f / 255),
                        ts_tf_normalize(3, mean, std), ts_tf_hwc_to_chw()};
  ts_pipeline_config c = ts_pipeline_config_default();
  c.source = src;
  c.transforms = tf;
  c.ntransforms = 5;
  c.batch_size = 64;
  c.drop_remainder = 1;
  c.num_workers = workers;
  c.prefetch = 4;
  c.epochs = epochs;
  c.seed = 1;
  c.sampler.kind = TS_SAMPLER_RANDOM;
  ts_pipeline *p;
  double t0 = ts_time_now();
  if (ts_pipeline_create(&c, &p)) {
    fprintf(stderr, "bench_data: %s\n", ts_last_error());
    exit(1);
  }
  ts_batch b;
  int64_t n = 0;
  double t1 = 0;
  for (;;) {
    if (ts_pipeline_next(p, &b)) {
      fprintf(stderr, "bench_data: %s\n", ts_last_error());
      exit(1);
    }
    if (!b.size) break;
    if (!t1) t1 = ts_time_now(); /* time from the first batch: excludes thread start and fill */
    else n += b.size;
  }
  double t2 = ts_time_now();
  ts_pipeline_free(p);
  *images = n;
  *first_ms = (t1 - t0) * 1e3;
  return t2 - t1;
}

int main(int argc, char **argv) {
  int64_t n = 10000, epochs = 10;
  int records = 1;
  double step_ms = 630.0;
  char wlist[64] = "1,2";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--images") && i + 1 < argc) n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc) snprintf(wlist, sizeof wlist, "%s", argv[++i]);
    else if (!strcmp(argv[i], "--no-records")) records = 0;
    else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_data [--images N] [--epochs E] [--workers 1,2] [--no-records] [--step-ms 630]\n");
      return 2;
    }
  }
  if (n < 64 || epochs < 1) {
    fprintf(stderr, "bench_data: need --images >= 64 and --epochs >= 1\n");
    return 2;
  }
  const double consume = 64.0 / (step_ms / 1000.0);

  mem_src m = {n, malloc((size_t)n * 3072), malloc((size_t)n)};
  if (!m.pix || !m.lab) return 1;
  for (int64_t i = 0; i < n * 3072; i += 4) {
    uint32_t r = ts_philox4x32(7, 0, (uint64_t)i).v[0];
    memcpy(m.pix + i, &r, (size_t)(n * 3072 - i < 4 ? n * 3072 - i : 4));
  }
  for (int64_t i = 0; i < n; i++) m.lab[i] = (uint8_t)(i % 10);
  ts_source_vtable vt = {"synthetic-cifar", m_len, m_get, m_label, m_ncls, NULL, NULL};
  ts_source *mem;
  if (ts_source_create(&vt, &m, &mem)) return 1;

  /* the transforms alone, one thread: the per-image cost without the pipeline */
  {
    static const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
    ts_transform tf[5] = {ts_tf_random_crop(32, 32, 4), ts_tf_hflip(0.5f), ts_tf_to_float(1.0f / 255),
                          ts_tf_normalize(3, mean, std), ts_tf_hwc_to_chw()};
    int64_t k = n < 20000 ? n : 20000;
    double t0 = ts_time_now();
    for (int64_t i = 0; i < k; i++) {
      ts_sample s;
      ts_source_get(mem, i, &s);
      ts_transforms_apply(tf, 5, &s, (uint64_t)i);
      ts_sample_free(&s);
    }
    double dt = ts_time_now() - t0;
    printf("{\"bench\":\"data\",\"what\":\"get+transforms, 1 thread, no pipeline\",\"images\":%lld,"
           "\"seconds\":%.4f,\"us_per_image\":%.2f,\"images_per_s\":%.0f}\n",
           (long long)k, dt, dt / (double)k * 1e6, (double)k / dt);
  }

  char dir[] = "/tmp/tessera-bench-data-XXXXXX";
  char **paths = NULL;
  ts_source *rec = NULL;
  const int nshards = 4;
  if (records) {
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      return 1;
    }
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s/cifar", dir);
    if (ts_records_write(mem, prefix, nshards, &paths) || ts_source_records((const char *const *)paths, nshards, &rec)) {
      fprintf(stderr, "bench_data: records: %s\n", ts_last_error());
      return 1;
    }
  }

  for (int s = 0; s < 1 + (rec != NULL); s++) {
    ts_source *src = s ? rec : mem;
    for (char *w = wlist; *w;) {
      int workers = atoi(w);
      int64_t images;
      double first_ms;
      double dt = run(src, workers, epochs, &images, &first_ms);
      double ips = (double)images / dt;
      printf("{\"bench\":\"data\",\"source\":\"%s\",\"pipeline\":\"random_crop(32,pad 4)+hflip+to_float+normalize+"
             "hwc_to_chw\",\"batch\":64,\"workers\":%d,\"images\":%lld,\"seconds\":%.4f,\"images_per_s\":%.0f,"
             "\"first_batch_ms\":%.2f,\"resnet18_step_images_per_s\":%.1f,\"ratio\":%.1f}\n",
             s ? "records" : "memory", workers, (long long)images, dt, ips, first_ms, consume, ips / consume);
      fflush(stdout);
      while (*w && *w != ',') w++;
      if (*w == ',') w++;
    }
  }

  if (rec) ts_source_free(rec);
  if (paths) {
    for (int i = 0; i < nshards; i++) {
      unlink(paths[i]);
      free(paths[i]);
    }
    free(paths);
    rmdir(dir);
  }
  ts_source_free(mem);
  free(m.pix);
  free(m.lab);
  return 0;
}
