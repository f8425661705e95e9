/* Executor adapters for the misc family: CONST, CAST, COPY. */
#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/misc.h"
#include "../kernels/shape.h"

static int run_const(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__fill_ref(out[0].data, out[0].dtype, (size_t)ts_tensor_numel(&out[0]), ts_attr_const_value(&n->a));
}

static int run_cast(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__cast_ref(in[0].data, in[0].dtype, out[0].data, out[0].dtype,
                      (size_t)ts_tensor_numel(&in[0]));
}

static int run_copy(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  return ts__copy_ref(in[0].data, out[0].data, ts_tensor_nbytes(&in[0]));
}

void ts__register_run_misc(ts__run_fn *tab) {
  tab[TS_OP_CONST] = run_const;
  tab[TS_OP_CAST] = run_cast;
  tab[TS_OP_COPY] = run_copy;
}
