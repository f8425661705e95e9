/* Minimal test harness: CHECK macros that count failures and report file:line, helpers for
 * random data and tolerant comparison. A test's main() returns ts_test_finish(). */
#ifndef TS_TEST_UTIL_H
#define TS_TEST_UTIL_H

#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include "tessera/base.h"
#include "tessera/tensor.h"
#include "tessera/runtime.h"

extern int ts_test_failures;
extern int ts_test_checks;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    ts_test_checks++;                                                                \
    if (!(cond)) {                                                                   \
      ts_test_failures++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
    }                                                                                \
  } while (0)

#define CHECK_MSG(cond, ...)                                                         \
  do {                                                                               \
    ts_test_checks++;                                                                \
    if (!(cond)) {                                                                   \
      ts_test_failures++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
    }                                                                                \
  } while (0)

/* Checks a status is TS_OK, printing ts_last_error() otherwise. */
#define CHECK_OK(expr)                                                               \
  do {                                                                               \
    int rc_ = (expr);                                                                \
    ts_test_checks++;                                                                \
    if (rc_ != TS_OK) {                                                              \
      ts_test_failures++;                                                            \
      fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr, \
              rc_, ts_strerror(rc_), ts_last_error());                               \
    }                                                                                \
  } while (0)

/* Deterministic fill with uniform values in [lo, hi) from (seed, index). */
void ts_test_fill(float *x, size_t n, uint64_t seed, float lo, float hi);
/* bf16 helpers of the 16-bit kernel tests: x rounded to bf16 in place and its bf16 copy
 * (malloc'd); a bf16 array widened to a new f32 one; ||a - b||_2 / ||b||_2. */
uint16_t *ts_test_to_bf16(float *x, int64_t n);
/* v (finite) rounded to bf16 (nearest even) and widened back; inline: reference loops call it
 * per term */
static inline float ts_test_bf16_round(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&v, &u, 4);
  return v;
}
/* Under the stand-in driver (TESSERA_LIBCUDA): whether its emulator runs the kernels (not under
 * ASan, nor with FAKE_CUDA_EMULATE=0); says which on stdout. */
int ts_test_stand_in_emulates(void);
/* A value a test binds for a plan's runs: init (NULL: zeros) its contents before, res (NULL: an
 * input) where its contents go after. */
typedef struct {
  ts_val v;
  const void *init;
  void *res;
  size_t bytes;
} ts_test_bound;
struct ts__dev;
/* Binds b[0..nb) to p: on the GPU d, device memory filled from init or zeros (kept in mem[i]); on
 * the CPU (d NULL), res filled from init or zeros when given, else init itself. CHECKs each step. */
void ts_test_bind(ts_plan *p, struct ts__dev *d, const ts_test_bound *b, int nb, void **mem);
/* After the runs: each kept value k[i].v of p read into k[i].res (k[i].bytes; from the device d). */
void ts_test_read_kept(ts_plan *p, struct ts__dev *d, const ts_test_bound *k, int nk);
/* After the runs: each res filled from its device memory (d), which is freed. */
void ts_test_unbind(struct ts__dev *d, const ts_test_bound *b, int nb, void **mem);
float *ts_test_from_bf16(const uint16_t *h, int64_t n);
double ts_test_rel_l2(const float *a, const float *b, int64_t n);
/* Max |a-b| / (atol + rtol*|b|) over n: <= 1 means within tolerance. Reports worst index. */
double ts_test_close(const float *a, const float *b, size_t n, double atol, double rtol,
                     size_t *worst);
/* CHECK that two arrays are close; prints the worst element on failure. */
#define CHECK_CLOSE(a, b, n, atol, rtol, what)                                            \
  do {                                                                                    \
    size_t w_ = 0;                                                                        \
    double r_ = ts_test_close((a), (b), (n), (atol), (rtol), &w_);                        \
    ts_test_checks++;                                                                     \
    if (!(r_ <= 1.0)) {                                                                   \
      ts_test_failures++;                                                                 \
      fprintf(stderr, "%s:%d: %s: not close at [%zu]: %.8g vs %.8g (ratio %.3g)\n",      \
              __FILE__, __LINE__, (what), w_, (double)(a)[w_], (double)(b)[w_], r_);      \
    }                                                                                     \
  } while (0)

/* CHECK that rc is `code` and that the last error message contains every following string:
 * EXPECT_ERR(ts_layout_check_shape(&l, &g), TS_ESHAPE, "dim 1", "size 6"). */
void ts_test_expect_err(const char *file, int line, int rc, int code, const char *const *subs);
#define EXPECT_ERR(rc, code, ...) \
  ts_test_expect_err(__FILE__, __LINE__, (rc), (code), (const char *const[]){__VA_ARGS__, NULL})

/* A training step's plan for a graph whose backward is appended: allocates p (seed), attaches
 * the gradients, plans keeping them and `loss`, binds p. NULL (with a CHECK failure) on error. */
struct ts_graph;
struct ts_params;
struct ts_plan;
struct ts_plan *ts_test_train_plan(struct ts_graph *g, struct ts_params *p, int32_t loss, uint64_t seed);

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt). */
#define TS_TEST_SKIPPED 77
/* Records that a part of the test could not run and prints "SKIP: <reason>"; ts_test_finish
 * then returns TS_TEST_SKIPPED unless a check failed (a failure always wins). */
void ts_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Where the tests find Fashion-MNIST: $TS_TEST_FASHION_MNIST if set, else TS_FASHION_MNIST_DIR. */
const char *ts_test_fashion_mnist_dir(void);
/* 1 if the Fashion-MNIST files the tests read are there; else records a skip naming the folder. */
int ts_test_have_fashion_mnist(void);
/* Writes the first ntrain training and ntest test samples of that Fashion-MNIST into dir (made if
 * missing) as plain IDX files: the very samples data.train_limit / data.test_limit take, for the
 * tests that train many short runs (each run would otherwise decompress the whole 47 MB training
 * set, 0.3 s of CPU per rank). 0, or -1 with a message on stderr. */
int ts_test_fashion_mnist_prefix(const char *dir, int64_t ntrain, int64_t ntest);
/* The same for the ranks of an MPI test: rank 0 writes it to /tmp/<tag>_<parent pid>_fm (mpirun's
 * ranks share the parent) while the others wait; returns that folder (static storage), which
 * ts_test_fashion_mnist_shared_done removes at the end (rank 0, after a barrier). Where
 * Fashion-MNIST is not installed it returns ts_test_fashion_mnist_dir() and writes nothing. */
struct ts_comm;
const char *ts_test_fashion_mnist_shared(struct ts_comm *w, const char *tag, int64_t ntrain, int64_t ntest);
void ts_test_fashion_mnist_shared_done(struct ts_comm *w);

/* Writes a deterministic text of `bytes` bytes (letters, spaces, newlines; the same for a seed)
 * to path, for the tests that train GPT on a text file. 0, or -1 when it cannot be written. */
int ts_test_write_text(const char *path, unsigned seed, int bytes);
/* GPT's Megatron-LM cuts of examples/gpt_tp.yaml on 2 devices, as a --set of parallel.strategies. */
extern const char *const ts_test_gpt_tp2;

/* Prints "name: N checks, F failures" (and the skips) and returns the exit code:
 * 1 on a failure, TS_TEST_SKIPPED if something was skipped, else 0. */
int ts_test_finish(const char *name);
/* ts_test_finish for a test run on every rank of an MPI job: the worst status over the ranks
 * (failure over skip over success) on every rank, then MPI is finalized. */
int ts_test_finish_job(const char *name);

#endif
