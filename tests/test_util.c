#include <math.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"
#include "tessera/data.h"
#include "tessera/nn.h"
#include "tessera/comm.h"
#include "tessera/runtime.h"
#include "kernels/lowp.h"
#include "device/dev.h"

int ts_test_failures = 0;
int ts_test_checks = 0;
static int ts_test_skips = 0;

void ts_test_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("SKIP: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  ts_test_skips++;
}

const char *ts_test_fashion_mnist_dir(void) {
  const char *d = getenv("TS_TEST_FASHION_MNIST");
  return d && *d ? d : TS_FASHION_MNIST_DIR;
}

int ts_test_have_fashion_mnist(void) {
  char p[4096];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", ts_test_fashion_mnist_dir());
  if (access(p, R_OK) == 0) return 1;
  ts_test_skip("Fashion-MNIST not installed in %s (scripts/install-deps.sh installs it)",
               ts_test_fashion_mnist_dir());
  return 0;
}

void ts_test_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * ts_rng_uniform_at(seed, i);
}

double ts_test_close(const float *a, const float *b, size_t n, double atol, double rtol,
                     size_t *worst) {
  double wr = 0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double r = d / (atol + rtol * fabs((double)b[i]));
    if (!(r <= wr) ) { /* also catches NaN */
      if (isnan(r)) { wr = INFINITY; wi = i; break; }
      wr = r;
      wi = i;
    }
  }
  if (worst) *worst = wi;
  return wr;
}

void ts_test_expect_err(const char *file, int line, int rc, int code, const char *const *subs) {
  ts_test_checks++;
  if (rc != code) {
    ts_test_failures++;
    fprintf(stderr, "%s:%d: expected status %d (%s), got %d (%s): %s\n", file, line, code,
            ts_strerror(code), rc, ts_strerror(rc), ts_last_error());
    return;
  }
  for (int k = 0; subs[k]; k++) {
    ts_test_checks++;
    if (!strstr(ts_last_error(), subs[k])) {
      ts_test_failures++;
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", file, line, ts_last_error(), subs[k]);
    }
  }
}

int ts_test_finish(const char *name) {
  printf("%s: %d checks, %d failures", name, ts_test_checks, ts_test_failures);
  if (ts_test_skips) printf(", %d part(s) skipped", ts_test_skips);
  printf("\n");
  return ts_test_failures ? 1 : ts_test_skips ? TS_TEST_SKIPPED : 0;
}

int ts_test_finish_job(const char *name) {
  int rc = ts_test_finish(name), all = rc;
  ts_comm *w = NULL;
  if (ts_comm_initialized() && ts_comm_world(&w) == TS_OK) {
    ts_comm_allreduce(w, &rc, &all, 1, TS_I32, TS_REDUCE_MAX);
    ts_comm_free(w);
  }
  ts_comm_finalize();
  return all;
}

ts_plan *ts_test_train_plan(ts_graph *g, ts_params *p, ts_val loss, uint64_t seed) {
  /* room for every parameter's gradient (the store's count: models of any size) and the loss */
  int cap = ts_params_count(p) + 1, nk = 0;
  ts_val *keep = malloc(sizeof *keep * (size_t)cap);
  ts_plan *plan = NULL;
  CHECK(keep != NULL);
  if (!keep) return NULL;
  CHECK_OK(ts_params_alloc(p, seed));
  CHECK_OK(ts_params_attach_grads(p, g, keep, cap - 1, &nk));
  keep[nk++] = loss;
  CHECK_OK(ts_plan_create(g, keep, nk, &plan));
  if (plan) CHECK_OK(ts_params_bind(p, g, plan));
  free(keep);
  return plan;
}

int ts_test_fashion_mnist_prefix(const char *dir, int64_t ntrain, int64_t ntest) {
  static const char *const split[2] = {"train", "t10k"}, *const kind[2] = {"images-idx3-ubyte", "labels-idx1-ubyte"};
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot make %s\n", dir);
    return -1;
  }
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 2; k++) {
      char in[4200], out[4200];
      snprintf(in, sizeof in, "%s/%s-%s.gz", ts_test_fashion_mnist_dir(), split[s], kind[k]);
      snprintf(out, sizeof out, "%s/%s-%s", dir, split[s], kind[k]);
      ts_tensor t;
      if (ts_idx_load(in, &t) != TS_OK) {
        fprintf(stderr, "%s\n", ts_last_error());
        return -1;
      }
      int64_t n = s ? ntest : ntrain, row = ts_tensor_numel(&t) / t.shape.dims[0];
      if (n > t.shape.dims[0]) n = t.shape.dims[0];
      unsigned char hdr[4 + 4 * TS_MAX_DIMS] = {0, 0, 0x08, (unsigned char)t.shape.ndim};
      for (int i = 0; i < t.shape.ndim; i++) {
        uint32_t d = (uint32_t)(i ? t.shape.dims[i] : n);
        hdr[4 + 4 * i] = (unsigned char)(d >> 24), hdr[5 + 4 * i] = (unsigned char)(d >> 16);
        hdr[6 + 4 * i] = (unsigned char)(d >> 8), hdr[7 + 4 * i] = (unsigned char)d;
      }
      FILE *f = fopen(out, "wb");
      int ok = f && fwrite(hdr, 1, 4 + 4 * (size_t)t.shape.ndim, f) == 4 + 4 * (size_t)t.shape.ndim &&
               fwrite(t.data, 1, (size_t)(n * row), f) == (size_t)(n * row);
      if (f && fclose(f)) ok = 0;
      ts_tensor_free(&t);
      if (!ok) {
        fprintf(stderr, "cannot write %s\n", out);
        return -1;
      }
    }
  return 0;
}

static char ts_test_fm_dir[300];

const char *ts_test_fashion_mnist_shared(ts_comm *w, const char *tag, int64_t ntrain, int64_t ntest) {
  char p[4096];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", ts_test_fashion_mnist_dir());
  if (access(p, R_OK) != 0) return ts_test_fashion_mnist_dir(); /* not installed: the test skips its runs */
  snprintf(ts_test_fm_dir, sizeof ts_test_fm_dir, "/tmp/%s_%d_fm", tag, (int)getppid());
  if (ts_comm_rank(w) == 0) CHECK(ts_test_fashion_mnist_prefix(ts_test_fm_dir, ntrain, ntest) == 0);
  ts_comm_barrier(w);
  return ts_test_fm_dir;
}

void ts_test_fashion_mnist_shared_done(ts_comm *w) {
  ts_comm_barrier(w);
  if (ts_comm_rank(w) != 0 || !ts_test_fm_dir[0]) return;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ts_test_fm_dir);
  CHECK(system(cmd) == 0);
}

int ts_test_write_text(const char *path, unsigned seed, int bytes) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  uint32_t s = seed;
  for (int i = 0; i < bytes; i++) {
    s = s * 1103515245u + 12345u;
    fputc("etaoin shrdlu cmfwyp\n"[(s >> 16) % 21], f);
  }
  return fclose(f) ? -1 : 0;
}

const char *const ts_test_gpt_tp2 =
    "parallel.strategies={transformer.embedding: '((1,1),(2,1))', "
    "transformer.h.*.attn.c_attn.dense*: '((1,1,1),(2,1),(2,))', "
    "transformer.h.*.attn.attention: '((1,2,1,1),(1,2,1,1),(1,2,1,1))', "
    "transformer.h.*.attn.c_proj.dense: '((1,1,2),(1,2))', transformer.h.*.mlp.c_fc.dense: '((1,1,1),(2,1))', "
    "transformer.h.*.mlp.c_proj.dense: '((1,1,2),(1,2))', dense: '((1,1,1),(2,1))', softmax_ce: '((1,2),(1,))'}";

uint16_t *ts_test_to_bf16(float *x, int64_t n) {
  uint16_t *h = malloc((size_t)n * 2);
  ts__lp_from_f32(x, h, TS_BF16, n);
  ts__lp_to_f32(h, TS_BF16, x, n);
  return h;
}

int ts_test_stand_in_emulates(void) {
  void *fk = dlopen(getenv("TESSERA_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  int *emu = fk ? dlsym(fk, "fake_cuda_emulates") : NULL;
  const char *off = getenv("FAKE_CUDA_EMULATE");
  int on = emu && *emu && !(off && !strcmp(off, "0"));
  printf("the stand-in driver %s the kernels\n", on ? "emulates" : "only records");
  if (fk) dlclose(fk);
  return on;
}

float *ts_test_from_bf16(const uint16_t *h, int64_t n) {
  float *f = malloc((size_t)n * 4);
  ts__lp_to_f32(h, TS_BF16, f, n);
  return f;
}

double ts_test_rel_l2(const float *a, const float *b, int64_t n) {
  double e2 = 0, r2 = 0;
  for (int64_t i = 0; i < n; i++) e2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r2 += (double)b[i] * b[i];
  return sqrt(e2 / r2);
}

void ts_test_bind(ts_plan *p, struct ts__dev *d, const ts_test_bound *b, int nb, void **mem) {
  for (int i = 0; i < nb; i++) {
    void *ptr;
    mem[i] = NULL;
    if (d) {
      CHECK_OK(ts__dev_alloc(d, b[i].bytes, &mem[i]));
      if (b[i].init) CHECK_OK(ts__dev_copy(d, mem[i], b[i].init, b[i].bytes, TS__H2D, NULL));
      else CHECK_OK(ts__dev_memset0(d, mem[i], b[i].bytes, NULL));
      ptr = mem[i];
    } else if (b[i].res) {
      if (b[i].init) memcpy(b[i].res, b[i].init, b[i].bytes);
      else memset(b[i].res, 0, b[i].bytes);
      ptr = b[i].res;
    } else {
      ptr = (void *)b[i].init;
    }
    CHECK_MSG(ts_plan_bind(p, b[i].v, ptr) == TS_OK, "binding %d: %s", i, ts_last_error());
  }
}

void ts_test_read_kept(ts_plan *p, struct ts__dev *d, const ts_test_bound *k, int nk) {
  for (int i = 0; i < nk; i++) {
    const void *src = ts_plan_data(p, k[i].v);
    CHECK_MSG(src != NULL, "kept value %d: no data", i);
    if (!src) continue;
    if (d) CHECK_OK(ts__dev_copy(d, k[i].res, src, k[i].bytes, TS__D2H, NULL));
    else memcpy(k[i].res, src, k[i].bytes);
  }
}

void ts_test_unbind(struct ts__dev *d, const ts_test_bound *b, int nb, void **mem) {
  for (int i = 0; d && i < nb; i++)
    if (b[i].res) CHECK_OK(ts__dev_copy(d, b[i].res, mem[i], b[i].bytes, TS__D2H, NULL));
  if (d) CHECK_OK(ts__dev_sync(d));
  for (int i = 0; d && i < nb; i++) ts__dev_free(d, mem[i]), mem[i] = NULL;
}
