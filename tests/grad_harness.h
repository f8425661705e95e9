/* Shared harness of the gradient tests (tests/graph/test_grad_*.c); grad_harness.c is linked into
 * every test executable next to test_util.c.
 *
 * gh_check(): gradient check of one forward graph with output y. Adds
 *   loss = dense(reshape(y, (1,ny)), r) = sum(y * r) with fixed random weights r (no gradient),
 *   runs ts_graph_backward, then runs loss, y and the input gradients through the planner and
 *   executor on the REF and the FAST backend. Every input of the graph is passed in x[] and bound
 *   to the caller's values or generated ones. Checks: the graph built; every wanted input has a
 *   gradient and no other has one; plan/bind/run succeed on both backends; and
 *   - with a double-precision forward (o->fwd): y of both backends vs that forward (o->tol), the
 *     loss too if o->loss_tol > 0, and the wanted gradients of both backends vs central finite
 *     differences of that forward (step o->eps);
 *   - without one (o->fwd NULL): the REF gradients vs central finite differences of the graph
 *     itself, run on REF in float (step o->eps * max(1,|x|)); FAST's y and gradients vs REF's
 *     (GH_FAST_ATOL + GH_FAST_RTOL relative).
 *   Gradients are compared at up to GH_SAMPLES evenly spread elements per input (all elements
 *   of smaller inputs) with |g - fd| <= grad_atol + grad_rtol |fd|; FAST vs REF compares all.
 * gh_fixture(): runs one PyTorch fixture (tests/fixtures/op_<name>.safetensors, docs/fixtures.md)
 *   through a graph built by a callback: forward output vs out0 and every grad_in<k> vs the
 *   gradient of sum(out0 * dout0), on both backends.
 * CHECK_GRAPH_ERROR(): a graph-building call failed with the expected status and message. */
#ifndef TS_TEST_GRAD_HARNESS_H
#define TS_TEST_GRAD_HARNESS_H

#include <stdint.h>

#include "tessera/tessera.h"
#include "test_util.h"

#define GH_MAX_IN 8    /* inputs per gh_check / gh_fixture graph */
#define GH_SAMPLES 256 /* gradient elements compared with finite differences, per input */
#define GH_FAST_ATOL 1e-4
#define GH_FAST_RTOL 1e-3

/* Double-precision forward: x[k] holds input k (integers converted), y gets numel(y) values. */
typedef void (*gh_fwd_fn)(double *const *x, double *y, const void *ctx);

/* Options of gh_check; zero fields take the defaults. */
typedef struct {
  gh_fwd_fn fwd;           /* reference forward; NULL: finite differences of the graph itself */
  const void *ctx;         /* passed to fwd */
  const int *want;         /* per input: 1 = check its gradient, 0 = requires_grad turned off and
                            * no gradient expected. NULL: 1 for f32 inputs, 0 for the others */
  const void *const *data; /* per input: its values, copied (f32, i32 or i64; integer inputs
                            * need them). NULL or a NULL entry: generated f32 values */
  int distinct;            /* generated values are a permutation of n evenly spaced values in
                            * [-1,1) (no two closer than 2/n, so a finite-difference step of 1e-3
                            * never flips an arg-max) instead of uniform random in [-1,1) */
  double eps;              /* finite-difference step; default 1e-3 */
  double tol;              /* y vs fwd: |a-b| <= tol + tol |b|; default 1e-5 */
  double grad_atol;        /* gradients vs finite differences; default tol */
  double grad_rtol;        /* default grad_atol */
  double loss_tol;         /* > 0: the loss vs fwd's sum(y * r) too (abs + rel) */
  uint64_t step;           /* step given to ts_plan_run (dropout streams) */
} gh_opts;

/* Checks case `what` (see above). Inputs are generated from the case number, so a test's cases
 * see the same values from run to run. */
void gh_check(const char *what, ts_graph *g, ts_val y, int nin, const ts_val *x, const gh_opts *o);

/* Number of gh_check cases that built and were run. */
int gh_cases(void);

/* The loss gh_check adds: dense(reshape(y, (1,ny)), r) = sum(y * r), with *r a new input "gh_r"
 * of shape (1,ny) without gradient (bind it to ny floats). */
ts_val gh_weighted_loss(ts_graph *g, ts_val y, ts_val *r);

/* Builds the fixture's graph on inputs in[0..nin) (named in<k>, dtype and shape of the file). */
typedef ts_val (*gh_build_fn)(ts_graph *g, const ts_val *in, int nin);

/* Runs fixture op_<name> with `nin` inputs (inputs listed in the fixture's no_grad_inputs and
 * integer inputs get no gradient). training: the graph's training flag. Tolerance
 * |a-b| <= atol + rtol |b|. aux_stats: for batch-norm training fixtures, also compares the
 * updated running stats (inputs 3 and 4) with aux.running_mean / aux.running_var. */
void gh_fixture(const char *name, int nin, gh_build_fn build, int training, double atol,
                double rtol, int aux_stats);

/* CHECKs (three checks) that v is TS_NONE, that g's sticky status is `code` and that its message
 * contains n1 and n2 (a NULL needle is not looked for). what: describes the case, or NULL. */
#define CHECK_GRAPH_ERROR(g, v, code, n1, n2, what) \
  gh_check_graph_error(__FILE__, __LINE__, (g), (v), (code), (n1), (n2), (what))
void gh_check_graph_error(const char *file, int line, ts_graph *g, ts_val v, int code,
                          const char *n1, const char *n2, const char *what);

#endif
