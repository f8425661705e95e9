/* Internal executor interface: one adapter per op kind turns a node and its bound tensors into
 * kernel calls. Adapters live in src/runtime/run_<family>.c. The runtime reads graphs only through
 * the public IR API (graph/graph_ir.h); a plan copies what its nodes need at ts_plan_create. */
#ifndef TS_RUN_IMPL_H
#define TS_RUN_IMPL_H

#include "graph/graph_ir.h"
#include "tessera/runtime.h"

/* A fusion the executor asks a node's adapter to carry out (exec.c, plan_fusions). */
typedef enum {
  TS__FUSE_NONE = 0,
  TS__FUSE_BN_RELU,     /* BATCHNORM: out[0] is the following ReLU's output: write relu(bn(x)) */
  TS__FUSE_BN_RELU_BWD, /* BATCHNORM_BWD: in[0] is dy of that ReLU's output (its ELTWISE_BWD skipped) */
  TS__FUSE_MM_GELU,     /* MATMUL/DENSE: out[0] is the following gelu's output (f32, or the node's
                         * dtype): write gelu(x w + b) (activation `act`) */
} ts__fuse_kind;

typedef struct {
  ts__fuse_kind kind;
  float alpha; /* the ReLU's negative slope */
  float *ab;   /* 2C floats the forward writes and the backward reads (its scale and shift) */
  int act;     /* MM_GELU: the gelu's ts_eltwise_alg */
} ts__fuse;

typedef struct {
  const ts_graph *g;
  uint64_t step;     /* current step (dropout stream) */
  ts_backend backend;
  ts_comm *const *comms; /* ncomms slots (ts_plan_set_comm), entries may be NULL */
  int ncomms;
  const ts__fuse *fuse;  /* the fusion this node carries out, NULL: run the node as written */
  struct ts__dev *dev;   /* a GPU plan's device (run_gpu.c), NULL on the CPU */
  int64_t *flag;         /* a GPU plan: this node's error flag in device memory (0: none; else 1 +
                            the position at fault, reported after the run) */
  struct ts_plan *plan;
  struct ts__dcoll *const *dcolls; /* a GPU plan: the device collectives per slot (TS_PLAN_MAX_COMMS) */
  /* a GPU plan: the distinct device collectives this run queued work on (ts__run_dcoll_used),
   * waited for at its end; used_all: more than fit, every slot's waited for */
  struct ts__dcoll *used[16];
  int nused, used_all;
  /* a GPU plan with channels last (run_gpu_conv.c): bit k set when the node's input (output) slot
   * k holds a value laid out NHWC in device memory */
  unsigned cl_in, cl_out;
} ts__runctx;

/* What an adapter sees of a node: copied from the graph once per plan. */
typedef struct {
  ts_op op;
  int nin, nout;
  const char *name; /* the graph's node name */
  ts_attrs a;       /* read with the ts_attr_* accessors */
} ts__run_node;

/* in[k]/out[k] are views of the node's input/output values (dtype, local shape, data). */
typedef int (*ts__run_fn)(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out);

/* Products of s's dims before `axis` (outer) and after it (inner): an op along one axis sees the
 * tensor as (outer, dims[axis], inner). */
static inline void ts__outer_inner(const ts_shape *s, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= s->dims[d];
  for (int d = axis + 1; d < s->ndim; d++) *inner *= s->dims[d];
}

/* Channels last on a GPU plan (run_gpu_conv.c says per node, exec.c decides per value): */
typedef enum {
  TS__CL_NO = 0, /* the node's 4-d values stay NCHW */
  TS__CL_CAN,    /* it runs NHWC when an activation slot (ain, aout) holds an NHWC value, staging the others */
  TS__CL_ANY,    /* element-wise: its activation slots share one layout, whichever */
} ts__cl_kind;
/* What node n does with the layouts of its slots (in/out: its tensors' dtypes and shapes; data
 * unused); bit k of *ain (*aout) set for the input (output) slots it lays out. */
ts__cl_kind ts__run_gpu_cl(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out, unsigned *ain,
                           unsigned *aout);
/* 1 for a convolution node whose tensors are all f16 and whose direction cuDNN runs in f16
 * (run_gpu_conv.c): run_gpu_lowp.c hands it over as it is, not through f32 copies */
int ts__run_gpu_conv_native(const ts__run_node *n, const ts_tensor *in, const ts_tensor *out);
/* 1 when NCHW and NHWC are the same memory for a tensor of shape s (not 4-d, 1x1, one channel) */
static inline int ts__cl_same(const ts_shape *s) {
  return s->ndim != 4 || (s->dims[2] == 1 && s->dims[3] == 1) || s->dims[1] == 1;
}

extern ts__run_fn ts__run[TS_OP_COUNT];
/* The GPU's kernel table (run_gpu.c): NULL where an op has no GPU kernel. */
extern ts__run_fn ts__run_gpu[TS_OP_COUNT];
void ts__register_run_gpu(ts__run_fn *tab);
void ts__register_run_gpu_coll(ts__run_fn *tab); /* run_gpu_coll.c */
void ts__register_run_gpu_conv(ts__run_fn *tab); /* run_gpu_conv.c: convolution, pooling, batch norm */
void ts__register_run_gpu_p2p(ts__run_fn *tab);  /* run_p2p.c: SEND/RECV staged through host memory */
/* Device memory of at least `bytes` for the running node of a GPU plan (valid until the node
 * returns; grown by the plan, kept between runs). */
int ts__run_dev_scratch(ts__runctx *ctx, size_t bytes, void **out);
/* Device memory of at least `bytes` for the f16 conversions around the running node
 * (run_gpu_lowp.c), apart from ts__run_dev_scratch's (which the node's adapter uses meanwhile). */
int ts__run_dev_wide(ts__runctx *ctx, size_t bytes, void **out);
/* Wraps the GPU adapters without f16 kernels so f16 nodes run through f32 copies (run_gpu_lowp.c);
 * called once by ts__run_init after the GPU families registered. */
void ts__run_gpu_f16_install(ts__run_fn *tab);
/* Pinned host memory of at least `bytes` for the running node of a GPU plan to stage device data
 * through (SEND/RECV; valid until the node returns; grown by the plan, kept between runs). */
int ts__run_host_stage(ts__runctx *ctx, size_t bytes, void **out);
/* Wraps every f32-only adapter in tab so it also runs bf16/f16 nodes by converting around it
 * (run_lowp.c); called once by ts__run_init after the families registered. */
void ts__run_lowp_install(ts__run_fn *tab);
/* Each family file fills its entries: void ts__register_run_<family>(ts__run_fn *tab). */
void ts__run_init(void);

/* The communicator in plan slot `slot` for a node over a group of gs ranks (run_coll.c): *out =
 * NULL when gs == 1 and the slot is empty (run without communicating); TS_EINVAL naming the slot,
 * `what` + the op and both sizes when the slot is empty or holds another group size. */
int ts__run_comm(ts__runctx *ctx, const ts__run_node *n, int slot, int gs, const char *what, ts_comm **out);
/* The same for a node of a plan on a GPU: the device collectives of the slot (ts_plan_set_dcoll;
 * run_gpu_coll.c), *out = NULL when gs == 1. */
struct ts__dcoll;
int ts__run_dcoll(ts__runctx *ctx, const ts__run_node *n, int slot, int gs, const char *what, struct ts__dcoll **out);
/* Records that this run queues work on x (its end waits for it within the comm timeout). */
void ts__run_dcoll_used(ts__runctx *ctx, struct ts__dcoll *x);

#endif
