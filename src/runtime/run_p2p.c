/* Executor adapters for the point-to-point family (SEND, RECV; attributes: src/graph/op_p2p.c).
 * SEND hands a copy of x to the communicator (ts_comm_send_copy: no blocking, so two stages
 * sending to each other never deadlock); RECV blocks until the message arrives (or the
 * communicator's timeout names the peer).
 * On a GPU (a pipeline's stages on GPU ranks) the same messages staged through the plan's pinned
 * host memory (ts__run_host_stage, kept between messages): SEND copies x out once the stream has
 * computed it, then hands that copy over as on the CPU; RECV receives into it and copies it onto
 * the device before the nodes reading it are queued. The messages are the CPU's, so a GPU stage talks to a CPU one alike. */
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "graph/graph_ir.h"
#include "run_impl.h"

/* The slot's communicator, of any size; the peer must be one of its ranks. */
static int run_comm_any(ts__runctx *ctx, const ts__run_node *n, int slot, ts_comm **out) {
  ts_comm *c = slot >= 0 && slot < ctx->ncomms && ctx->comms ? ctx->comms[slot] : NULL;
  *out = c;
  if (!c)
    return ts_error_set(TS_EINVAL, "plan slot %d holds no communicator for this %s (ts_plan_set_comm)", slot,
                        ts_op_name(n->op));
  if (ts_attr_p2p_peer(&n->a) >= ts_comm_size(c))
    return ts_error_set(TS_EINVAL, "%s: peer %lld is not a rank of the %d-rank communicator in slot %d",
                        ts_op_name(n->op), (long long)ts_attr_p2p_peer(&n->a), ts_comm_size(c), slot);
  return TS_OK;
}

static int run_send(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = run_comm_any(ctx, n, (int)ts_attr_p2p_slot(&n->a), &c);
  if (rc) return rc;
  *(float *)out[0].data = 0;
  return ts_comm_send_copy(c, in[0].data, (size_t)ts_tensor_numel(&in[0]), in[0].dtype, (int)ts_attr_p2p_peer(&n->a),
                           (int)ts_attr_p2p_tag(&n->a));
}

static int run_recv(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)in;
  ts_comm *c;
  int rc = run_comm_any(ctx, n, (int)ts_attr_p2p_slot(&n->a), &c);
  if (rc) return rc;
  return ts_comm_recv(c, out[0].data, (size_t)ts_tensor_numel(&out[0]), out[0].dtype, (int)ts_attr_p2p_peer(&n->a),
                      (int)ts_attr_p2p_tag(&n->a));
}

void ts__register_run_p2p(ts__run_fn *tab) {
  tab[TS_OP_SEND] = run_send;
  tab[TS_OP_RECV] = run_recv;
}

static int gpu_send(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  ts_comm *c;
  int rc = run_comm_any(ctx, n, (int)ts_attr_p2p_slot(&n->a), &c);
  if (rc) return rc;
  size_t bytes = ts_tensor_nbytes(&in[0]);
  void *h = NULL;
  rc = ts__run_host_stage(ctx, bytes ? bytes : 1, &h);
  if (!rc) rc = ts__dev_copy(ctx->dev, h, in[0].data, bytes, TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(ctx->dev); /* x computed and copied out */
  if (!rc) rc = ts_comm_send_copy(c, h, (size_t)ts_tensor_numel(&in[0]), in[0].dtype, (int)ts_attr_p2p_peer(&n->a),
                                  (int)ts_attr_p2p_tag(&n->a)); /* (copied: the staging memory is free again) */
  return rc ? rc : ts__dev_memset0(ctx->dev, out[0].data, ts_tensor_nbytes(&out[0]), NULL);
}

static int gpu_recv(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  (void)in;
  ts_comm *c;
  int rc = run_comm_any(ctx, n, (int)ts_attr_p2p_slot(&n->a), &c);
  if (rc) return rc;
  size_t bytes = ts_tensor_nbytes(&out[0]);
  void *h = NULL;
  rc = ts__run_host_stage(ctx, bytes ? bytes : 1, &h);
  if (!rc) rc = ts__dev_sync(ctx->dev); /* the staging memory's last copy done */
  if (!rc) rc = ts_comm_recv(c, h, (size_t)ts_tensor_numel(&out[0]), out[0].dtype, (int)ts_attr_p2p_peer(&n->a),
                             (int)ts_attr_p2p_tag(&n->a));
  if (!rc) rc = ts__dev_copy(ctx->dev, out[0].data, h, bytes, TS__H2D, NULL);
  if (!rc) rc = ts__dev_sync(ctx->dev); /* copied in before the staging memory is reused */
  return rc;
}

void ts__register_run_gpu_p2p(ts__run_fn *tab) {
  tab[TS_OP_SEND] = gpu_send;
  tab[TS_OP_RECV] = gpu_recv;
}
