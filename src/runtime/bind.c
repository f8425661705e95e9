/* Binding a parameter store's flat buffers into a plan (include/tessera/runtime.h). */
#include "tessera/runtime.h"

static int bind_one(ts_val v, void *data, void *plan) { return ts_plan_bind(plan, v, data); }

int ts_params_bind(ts_params *p, ts_graph *g, ts_plan *plan) {
  return ts_params_each_binding(p, g, bind_one, plan);
}
