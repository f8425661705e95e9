/* Dropout family: DROPOUT.
 *
 * Attribute layout (ts_attrs):
 *   DROPOUT (x f32) -> y     p (drop probability, 0 <= p <= 1), seed (the uint64
 *                            bit pattern), offset = element offset of this tensor in the global
 *                            numbering of the mask (0; for sharded tensors); run, stride: a
 *                            slice that is not one run of the global numbering (cut in a dim
 *                            after the first: sequence parallelism's (batch, sequence/t, hidden))
 *                            is runs of `run` elements, run k numbered from offset + k * stride
 *                            (run 0: the whole tensor is one run); group, gstride: cut in two
 *                            dims after the first ((batch, sequence/c, hidden/t)), the runs come
 *                            in groups of `group`, run k numbered from offset + (k / group) *
 *                            gstride + (k % group) * stride (group 0: no groups)
 *
 * The mask is regenerated from Philox(seed, step, element index) by the kernel (see
 * kernels/dropout.h), so the gradient is another DROPOUT node with the same attributes applied to
 * dy: it reproduces the identical mask in the same step. Graphs built with training off
 * (ts_graph_set_training(g, 0)) get no node at all: dropout is the identity. Distinct dropout
 * layers must use distinct seeds, or they drop the same positions. */
#include <string.h>

#include "graph_ir.h"
#include "graph_impl.h"

static int infer_dropout(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh) {
  char b[160];
  if (n->nin != 1 || n->nout != 1)
    return ts__graph_fail(g, TS_EINVAL, "dropout: expects 1 input and 1 output, got %d/%d", n->nin,
                          n->nout);
  const ts__value *x = ts__val(g, n->in[0]);
  static const char *const nm[1] = {"x"};
  if (ts__same_float(g, "dropout", n->in, nm, 1, NULL)) return g->status;
  float p = ts_attr_dropout_p(&n->a);
  if (!(p >= 0.0f && p <= 1.0f))
    return ts__graph_fail(g, TS_EINVAL, "dropout: probability %g for %s is outside [0,1]", (double)p,
                          ts__vstr(g, n->in[0], b, sizeof b));
  if (ts_attr_dropout_offset(&n->a) < 0)
    return ts__graph_fail(g, TS_EINVAL, "dropout: negative element offset %lld", (long long)ts_attr_dropout_offset(&n->a));
  int64_t run = ts_attr_dropout_run(&n->a), stride = ts_attr_dropout_stride(&n->a);
  if (run < 0 || (run > 0 && (stride < run || ts_shape_numel(&x->shape) % run)))
    return ts__graph_fail(g, TS_EINVAL, "dropout: runs of %lld elements %lld apart do not tile %s", (long long)run,
                          (long long)stride, ts__vstr(g, n->in[0], b, sizeof b));
  int64_t grp = ts_attr_dropout_group(&n->a), gst = ts_attr_dropout_gstride(&n->a);
  if (grp < 0 || (grp > 0 && (run == 0 || gst < grp * stride || (ts_shape_numel(&x->shape) / run) % grp)))
    return ts__graph_fail(g, TS_EINVAL, "dropout: groups of %lld runs %lld apart do not tile %s", (long long)grp,
                          (long long)gst, ts__vstr(g, n->in[0], b, sizeof b));
  odt[0] = x->dtype;
  osh[0] = x->shape;
  return TS_OK;
}

ts_val ts_dropout(ts_graph *g, ts_val x, float p, uint64_t seed) {
  if (!g) return TS_NONE;
  int xi = ts__vidx(g, x, "dropout");
  if (xi < 0 || g->status) return TS_NONE;
  if (!(p >= 0.0f && p <= 1.0f)) {
    char b[160];
    ts__graph_fail(g, TS_EINVAL, "dropout: probability %g for %s is outside [0,1]", (double)p,
                   ts__vstr(g, xi, b, sizeof b));
    return TS_NONE;
  }
  if (!g->training || p == 0.0f) return x;
  ts_attrs a;
  memset(&a, 0, sizeof a);
  ts_attr_set_dropout_p(&a, p);
  ts_attr_set_dropout_seed(&a, (int64_t)seed);
  return ts__add1(g, TS_OP_DROPOUT, &xi, 1, &a);
}

static int grad_dropout(ts_graph *g, int node, const int *dy, int *dx) {
  ts_attrs a = g->nodes[node].a;
  int in = dy[0];
  dx[0] = ts__emit(g, TS_OP_DROPOUT, &in, 1, &a);
  return dx[0] < 0 ? g->status : TS_OK;
}

void ts__register_dropout(ts__opdef *tab) {
  tab[TS_OP_DROPOUT] = (ts__opdef){"dropout", infer_dropout, grad_dropout, 0};
}
