/* 2-D convolution kernels: forward, backward-data, backward-weights (+ bias gradient).
 * f32, activations NCHW, weights OIHW (O, C/groups, KH, KW), contiguous. Padding is symmetric
 * (ph rows above and below, pw columns left and right); dilation 1 means none (PyTorch's
 * convention; the oneDNN kernels convert to oneDNN's d-1).
 * OH = (H + 2 ph - dh (KH - 1) - 1) / sh + 1, likewise OW. */
#ifndef TS_KERNELS_CONV_H
#define TS_KERNELS_CONV_H

#include <stdint.h>

#include "tessera/tensor.h"

typedef struct {
  int64_t N, C, H, W; /* input */
  int64_t O, KH, KW;  /* weights (O, C/groups, KH, KW) */
  int64_t OH, OW;     /* output */
  int64_t sh, sw, ph, pw, dh, dw, groups;
} ts__conv_desc;

/* Output size along one axis, or <= 0 if the kernel does not fit. */
int64_t ts__conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d);
/* Validates a descriptor (sizes positive, groups divide C and O, OH/OW consistent). */
int ts__conv_check(const ts__conv_desc *d, const char *what);

// x (N,C,H,W), w (O,C/g,KH,KW), b (O) or NULL -> y (N,O,OH,OW)
int ts__conv2d_fwd_ref(const ts__conv_desc *d, const float *x, const float *w, const float *b,
                       float *y);
// dy (N,O,OH,OW), w (O,C/g,KH,KW) -> dx (N,C,H,W)
int ts__conv2d_bwd_data_ref(const ts__conv_desc *d, const float *dy, const float *w, float *dx);
// x (N,C,H,W), dy (N,O,OH,OW) -> dw (O,C/g,KH,KW), db (O) if not NULL
int ts__conv2d_bwd_weight_ref(const ts__conv_desc *d, const float *x, const float *dy, float *dw,
                              float *db);

int ts__conv2d_fwd_dnnl(const ts__conv_desc *d, const float *x, const float *w, const float *b,
                        float *y);
int ts__conv2d_bwd_data_dnnl(const ts__conv_desc *d, const float *dy, const float *w, float *dx);
int ts__conv2d_bwd_weight_dnnl(const ts__conv_desc *d, const float *x, const float *dy,
                               float *dw, float *db);

/* Memory layout the oneDNN kernels use inside each direction: TS_CONV_FMT_PLAIN runs the
 * primitive directly on the caller's NCHW/OIHW buffers; TS_CONV_FMT_ANY lets oneDNN choose
 * (blocked) layouts and reorders to/from plain around the primitive. The defaults were picked
 * by bench/bench_kernels.c; the setter exists for that benchmark. dir: 0 fwd, 1 bwd_data,
 * 2 bwd_weight. */
enum { TS_CONV_FMT_PLAIN = 0, TS_CONV_FMT_ANY = 1 };
void ts__conv_dnnl_set_format(int dir, int fmt);
int ts__conv_dnnl_get_format(int dir);
/* Algorithm per direction. TS_CONV_ALG_DEFAULT: Winograd F(4x4,3x3) for 3x3 stride-1
 * undilated ungrouped convs with at least 32 input and output channels (measured ~2x faster
 * than direct there and ~2x the rounding error, ~1e-6 relative; slower on thin layers such as
 * an RGB stem), direct otherwise. The others force direct, Winograd where oneDNN has it (else
 * direct), or oneDNN's own choice (convolution_auto). */
enum { TS_CONV_ALG_DEFAULT = 0, TS_CONV_ALG_DIRECT, TS_CONV_ALG_WINOGRAD, TS_CONV_ALG_AUTO };
void ts__conv_dnnl_set_algo(int dir, int alg);
int ts__conv_dnnl_get_algo(int dir);
/* oneDNN's implementation name for the primitive of a direction ("" if unavailable). */
const char *ts__conv_dnnl_impl(const ts__conv_desc *d, int dir);

/* Time (seconds) the oneDNN kernels spent since the last reset, for profiling:
 * out[t][dir][k], t 0 f32 / 1 bf16, dir 0 fwd / 1 bwd_data / 2 bwd_weight, k 0 the reorders of
 * the inputs into the primitive's layouts (and scratch allocation), 1 the primitive, 2 the
 * reorders of the outputs back to plain. out may be NULL; reset != 0 zeroes the sums. */
void ts__conv_dnnl_stats(double out[2][3][3], int reset);

/* 16-bit variants: every buffer (bias and db included) of dtype dt (TS_BF16 or TS_F16), f32
 * accumulation, outputs rounded once. dnnl = 1: bf16 runs natively through oneDNN's convolution
 * primitives with bf16 memory descriptors (direct algorithm: oneDNN has no bf16 Winograd;
 * jit avx512_core_bf16 where the CPU has it), f16 converts to f32 around the f32 oneDNN kernel.
 * dnnl = 0: converts around the f32 reference kernel. */
// x (N,C,H,W) dt, w (O,C/g,KH,KW) dt, b (O) dt or NULL -> y (N,O,OH,OW) dt
int ts__conv2d_fwd_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *x, const void *w,
                      const void *b, void *y);
// dy (N,O,OH,OW) dt, w dt -> dx (N,C,H,W) dt
int ts__conv2d_bwd_data_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *dy,
                           const void *w, void *dx);
// x dt, dy dt -> dw (O,C/g,KH,KW) dt, db (O) dt if not NULL
int ts__conv2d_bwd_weight_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *x,
                             const void *dy, void *dw, void *db);
/* How a bf16 direction runs on the oneDNN path (dnnl = 1). TS_CONV_LP_NATIVE: oneDNN's bf16
 * primitive (direct); TS_CONV_LP_F32: the f32 primitive with f32's algorithm choice (Winograd on
 * 3x3 stride-1 layers, see above), its inputs reordered from plain bf16 into its blocked f32
 * layouts and its outputs back to plain bf16 (rounded once to nearest even) by the one reorder
 * per tensor the native path does anyway (the conversion rides on it); TS_CONV_LP_DEFAULT: f32
 * for backward-weights of ungrouped non-1x1 layers with >= 32 channels in and out when oneDNN
 * runs on more than one thread (omp_get_max_threads() > 1), native otherwise (why: lp_wants_f32
 * in conv_dnnl.c). dir: 0 fwd, 1 bwd_data, 2 bwd_weight. The setter
 * is for benchmarks and tests (process-wide, like ts__conv_dnnl_set_algo). */
enum { TS_CONV_LP_DEFAULT = 0, TS_CONV_LP_NATIVE, TS_CONV_LP_F32, TS_CONV_LP_WINO, TS_CONV_LP_GEMM };
void ts__conv_dnnl_set_lp_mode(int dir, int mode);
int ts__conv_dnnl_get_lp_mode(int dir);
/* The implementation name of the bf16 kernel of a direction: oneDNN's primitive,
 * TS_CONV_WINO_IMPL / TS_CONV_GEMM_IMPL for the kernels below, "converted" where this CPU's oneDNN
 * has no bf16 (the f32 primitive on widened values), "" if unavailable. */
const char *ts__conv_dnnl_impl_bf16(const ts__conv_desc *d, int dir);

/* bf16 Winograd F(2x2,3x3) (conv_wino.c) for 3x3, stride 1, pad 1, undilated, ungrouped convs
 * (ts__conv_wino_shape) on CPUs with AVX512-BF16 (ts__conv_wino_cpu): transforms in f32, the
 * transformed tensors in bf16, the 16 per-position GEMMs in bf16 with f32 accumulation, outputs
 * rounded once; plain NCHW/OIHW buffers in and out (no reorders); bitwise deterministic for any
 * thread count. TS_CONV_LP_WINO forces it (where the shape and CPU allow); TS_CONV_LP_DEFAULT
 * uses it for every direction of such convs with >= 32 channels in and out unless the
 * environment sets TESSERA_CONV_WINO=0 (then the rule above applies). st (may be NULL) gets
 * seconds added: [0] input/weight transforms, [1] GEMMs (fwd/bwd-data: with the fused output
 * transform), [2] bwd-weights' output transform and bias sum. */
#define TS_CONV_WINO_IMPL "wino_f2x2:avx512_bf16"
int ts__conv_wino_shape(const ts__conv_desc *d);
int ts__conv_wino_cpu(void);
// x (N,C,H,W) bf16, w (O,C,3,3) bf16, b (O) bf16 or NULL -> y (N,O,H,W) bf16
int ts__conv2d_fwd_wino(const ts__conv_desc *d, const void *x, const void *w, const void *b, void *y, double st[3]);
// dy (N,O,H,W) bf16, w (O,C,3,3) bf16 -> dx (N,C,H,W) bf16
int ts__conv2d_bwd_data_wino(const ts__conv_desc *d, const void *dy, const void *w, void *dx, double st[3]);
// x (N,C,H,W) bf16, dy (N,O,H,W) bf16 -> dw (O,C,3,3) bf16, db (O) bf16 if not NULL
int ts__conv2d_bwd_weight_wino(const ts__conv_desc *d, const void *x, const void *dy, void *dw, void *db,
                               double st[3]);
/* bf16 im2col GEMM convolution (conv_gemm.c) for ungrouped convs of any kernel size, stride,
 * padding and dilation whose output has an even pixel count per image (ts__conv_gemm_shape), on
 * CPUs with AVX512-BF16 (ts__conv_wino_cpu): plain NCHW/OIHW bf16 in and out (no reorders), the
 * bf16 micro-kernel of bf16_mk.h with f32 accumulation, outputs rounded once; bitwise the same
 * for any thread count. TS_CONV_LP_GEMM forces it (where shape and CPU allow); TS_CONV_LP_DEFAULT
 * uses it for the bf16 convs the Winograd kernel does not take, per direction where it was
 * measured faster (lp_wants_gemm in conv_dnnl.c), unless the environment sets
 * TESSERA_CONV_GEMM=0 (then oneDNN's primitives, by the rule above). Its time is in
 * ts__conv_dnnl_stats' bf16 row (as the primitive's) when called through the entry points above. */
#define TS_CONV_GEMM_IMPL "gemm_nchw:avx512_bf16"
int ts__conv_gemm_shape(const ts__conv_desc *d);
// x (N,C,H,W) bf16, w (O,C,KH,KW) bf16, b (O) bf16 or NULL -> y (N,O,OH,OW) bf16
int ts__conv2d_fwd_gemm(const ts__conv_desc *d, const void *x, const void *w, const void *b, void *y);
// dy (N,O,OH,OW) bf16, w (O,C,KH,KW) bf16 -> dx (N,C,H,W) bf16
int ts__conv2d_bwd_data_gemm(const ts__conv_desc *d, const void *dy, const void *w, void *dx);
// x (N,C,H,W) bf16, dy (N,O,OH,OW) bf16 -> dw (O,C,KH,KW) bf16, db (O) bf16 if not NULL
int ts__conv2d_bwd_weight_gemm(const ts__conv_desc *d, const void *x, const void *dy, void *dw, void *db);

/* Seconds the Winograd kernels spent since the last reset, out[dir][k] split as st above (they
 * are also in ts__conv_dnnl_stats' bf16 row when called through the 16-bit entry points). */
void ts__conv_wino_stats(double out[3][3], int reset);

#endif
