/* 2-D pooling kernels, f32 NCHW. Symmetric padding (ph/pw on both sides), floor output size
 * OH = (H + 2 ph - kh) / sh + 1; padding may be at most half the window (2 ph <= kh), so every
 * window holds at least one real element.
 *
 * Max pooling writes a u8 workspace of the output's shape used by its backward. The reference
 * kernels store the index of the (first) maximum inside the window, i*kw + j; the oneDNN kernels
 * store oneDNN's own workspace. The encodings are not interchangeable: the backward of a backend
 * must consume the workspace of the same backend's forward. Padded positions never win (they are
 * -inf); a NaN in the window wins (propagates), like PyTorch.
 *
 * Average pooling excludes padded positions from the divisor (PyTorch's count_include_pad=False,
 * oneDNN's pooling_avg_exclude_padding). */
#ifndef TS_KERNELS_POOL_H
#define TS_KERNELS_POOL_H

#include <stdint.h>

#include "tessera/tensor.h"

typedef struct {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
} ts__pool_desc;

/* Output size along one axis, or <= 0 if the window does not fit. */
int64_t ts__pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p);
/* Validates sizes, 2p <= k, OH/OW consistent, and for max pooling (is_max) kh*kw <= 256 (the
 * workspace holds a u8 index). */
int ts__pool_check(const ts__pool_desc *d, int is_max, const char *what);

// x (N,C,H,W) -> y (N,C,OH,OW), ws (N,C,OH,OW) u8
int ts__maxpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws);
// dy (N,C,OH,OW), ws (N,C,OH,OW) u8 -> dx (N,C,H,W)
int ts__maxpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx);
// x (N,C,H,W) -> y (N,C,OH,OW)
int ts__avgpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y);
// dy (N,C,OH,OW) -> dx (N,C,H,W)
int ts__avgpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, float *dx);

int ts__maxpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws);
int ts__maxpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx);
int ts__avgpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y);
int ts__avgpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, float *dx);

/* 16-bit pooling: x, y, dy, dx of dtype dt (bf16 or f16; f32 runs the f32 kernels). dnnl = 1 (fast
 * backend): bf16 through oneDNN's pooling primitive on bf16 memory (its workspace encoding, as
 * the f32 oneDNN kernels), f16 converted around the f32 oneDNN kernels (no f16 pooling in oneDNN
 * 2.6 on this CPU). dnnl = 0: the reference kernels' plane loops on planes widened to f32, each
 * output rounded once (the reference workspace encoding), for bf16 and f16. As for f32, the
 * backward must use the same dnnl as the forward that wrote the workspace. */
// x (N,C,H,W) dt -> y (N,C,OH,OW) dt, ws (N,C,OH,OW) u8
int ts__maxpool2d_fwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *x, void *y, uint8_t *ws);
// dy (N,C,OH,OW) dt, ws (N,C,OH,OW) u8 -> dx (N,C,H,W) dt
int ts__maxpool2d_bwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *dy, const uint8_t *ws, void *dx);
// x (N,C,H,W) dt -> y (N,C,OH,OW) dt
int ts__avgpool2d_fwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *x, void *y);
// dy (N,C,OH,OW) dt -> dx (N,C,H,W) dt
int ts__avgpool2d_bwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *dy, void *dx);
/* The name of the implementation oneDNN picks for this pooling (e.g. "jit:avx512_core"), or
 * "(none)". For benchmarks. */
const char *ts__pool_dnnl_impl(const ts__pool_desc *d, int is_max, int bwd, int bf16);

#endif
