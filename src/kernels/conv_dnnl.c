/* oneDNN 2.6 convolution kernels (see conv.h).
 *
 * Each direction's primitive is created once per (shape, attributes, layout mode) and cached.
 * In TS_CONV_FMT_ANY mode the primitive is created with format_tag_any and oneDNN picks its
 * preferred (blocked) layouts; the kernel then reorders the caller's plain NCHW/OIHW inputs
 * into scratch buffers, runs the primitive, and reorders outputs back. Nothing is kept between
 * calls (weights change every step). Reorder primitives are cached next to their convolution.
 * Scratch buffers are process-wide and grow to the largest size seen (kernels are launched from
 * one thread at a time; see dnnl_ctx.h). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "dnnl_ctx.h"
#include "lowp.h"
#include "tessera/base.h"
#include "tessera/tensor.h"

/* Layout defaults per direction, chosen from bench/bench_kernels.c on this machine (Xeon with
 * AVX-512, 1 thread, batch 64, ResNet-18 CIFAR convs, ms per training step; plain NCHW runs
 * oneDNN's gemm/jit ncsp kernels, "any" its blocked nChw16c kernels plus our reorders, which
 * cost ~0.7-0.9 ms per 16 MB activation, under 10% of the conv):
 *            plain (direct)   any (direct)   any (+ Winograd, the default)
 *   fwd          612              409              282
 *   bwd_data     766              434              287
 *   bwd_weight   754              513              306
 * Plain wins only on the small 1x1 stride-2 downsample convs (by ~15%, <1% of the step). */
static int g_fmt[3] = {TS_CONV_FMT_ANY, TS_CONV_FMT_ANY, TS_CONV_FMT_ANY};

void ts__conv_dnnl_set_format(int dir, int fmt) {
  if (dir >= 0 && dir < 3 && (fmt == TS_CONV_FMT_PLAIN || fmt == TS_CONV_FMT_ANY))
    g_fmt[dir] = fmt;
}
int ts__conv_dnnl_get_format(int dir) { return dir >= 0 && dir < 3 ? g_fmt[dir] : -1; }

static int g_alg[3] = {TS_CONV_ALG_DEFAULT, TS_CONV_ALG_DEFAULT, TS_CONV_ALG_DEFAULT};
void ts__conv_dnnl_set_algo(int dir, int alg) {
  if (dir >= 0 && dir < 3 && alg >= TS_CONV_ALG_DEFAULT && alg <= TS_CONV_ALG_AUTO) g_alg[dir] = alg;
}
int ts__conv_dnnl_get_algo(int dir) { return dir >= 0 && dir < 3 ? g_alg[dir] : -1; }

enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_WEIGHT = 2 };
/* Tensor slots of a primitive: fwd (SRC, WEIGHTS, BIAS, DST); bwd_data (DIFF_DST, WEIGHTS, -,
 * DIFF_SRC); bwd_weight (SRC, DIFF_DST, DIFF_BIAS, DIFF_WEIGHTS). Slot 3 is the main output,
 * slot 2 the bias (always plain). */
#define NSLOT 4

typedef struct {
  char tag[8];
  int32_t dir, fmt, with_bias, alg, dt, pdt; /* dt: the caller's buffers; pdt: the primitive's */
  int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups;
} conv_key;

typedef struct {
  char tag[8];
  conv_key conv;
  int32_t slot, pad_;
} reorder_key;

typedef struct {
  int arg[NSLOT];                  /* DNNL_ARG_* per slot (0 = unused) */
  int is_out[NSLOT];
  dnnl_memory_desc_t user[NSLOT];  /* plain layouts of the caller's buffers */
  dnnl_memory_desc_t prim[NSLOT];  /* layouts the primitive wants */
  int reorder[NSLOT];              /* 1 if prim != user */
  char impl[64];
} conv_aux;

/* Time split of run_conv (ts__conv_dnnl_stats): [bf16?][dir][0 reorders in, 1 primitive,
 * 2 reorders out], seconds, summed since the last reset. Two clock reads per part. */
static double g_stat[2][3][3];

void ts__conv_dnnl_stats(double out[2][3][3], int reset) {
  if (out) memcpy(out, g_stat, sizeof g_stat);
  if (reset) memset(g_stat, 0, sizeof g_stat);
}

static void *g_buf[NSLOT];
static size_t g_cap[NSLOT];

static void *scratch(int slot, size_t bytes) { return ts__scratch_grow(&g_buf[slot], &g_cap[slot], bytes); }

/* bf16 per direction (ts__conv_dnnl_set_lp_mode): see conv.h. */
static int g_lp_mode[3] = {TS_CONV_LP_DEFAULT, TS_CONV_LP_DEFAULT, TS_CONV_LP_DEFAULT};
void ts__conv_dnnl_set_lp_mode(int dir, int mode) {
  if (dir >= 0 && dir < 3 && mode >= TS_CONV_LP_DEFAULT && mode <= TS_CONV_LP_GEMM) g_lp_mode[dir] = mode;
}

/* Whether the environment variable `name` leaves a default on (unset, or not 0/off/false);
 * read once per process into *cache. */
static int env_on(const char *name, int *cache) {
  if (*cache < 0) {
    const char *e = getenv(name);
    *cache = !(e && (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "false")));
  }
  return *cache;
}

/* Whether bf16 direction dir of d runs the Winograd kernels (conv.h, conv_wino.c). */
static int lp_wants_wino(const ts__conv_desc *d, int dir) {
  static int env = -1;
  if (g_lp_mode[dir] != TS_CONV_LP_DEFAULT && g_lp_mode[dir] != TS_CONV_LP_WINO) return 0;
  if (!ts__conv_wino_shape(d) || !ts__conv_wino_cpu()) return 0;
  if (g_lp_mode[dir] == TS_CONV_LP_WINO) return 1;
  return env_on("TESSERA_CONV_WINO", &env) && d->C >= 32 && d->O >= 32;
}
/* Whether bf16 direction dir of d runs the GEMM kernels (conv.h, conv_gemm.c): by default for
 * what Winograd does not take, where they beat oneDNN's bf16 primitive plus its reorders
 * (bench_bf16 resnet_conv; thin layers measured with a ResNet-20 shape): the forward when there
 * are >= 32 output channels (its 32 columns) and it runs direct (>= 28 output pixels per image)
 * or the kernel is 1x1 (ResNet-18's last 3x3 stride-2 layer, 4x4 outputs through im2col: 3.1 ms
 * vs oneDNN's 2.7), backward-data when there are >= 32 input channels (likewise), backward-weights
 * when a 32-column panel of dW per thread exists (C KH KW >= 256) or the kernel is 1x1. */
static int lp_wants_gemm(const ts__conv_desc *d, int dir) {
  static int env = -1;
  if (g_lp_mode[dir] != TS_CONV_LP_DEFAULT && g_lp_mode[dir] != TS_CONV_LP_GEMM) return 0;
  if (!ts__conv_gemm_shape(d) || !ts__conv_wino_cpu()) return 0;
  if (g_lp_mode[dir] == TS_CONV_LP_GEMM) return 1;
  if (!env_on("TESSERA_CONV_GEMM", &env)) return 0;
  if (dir == DIR_FWD) return d->O >= 32 && (d->OH * d->OW >= 28 || (d->KH == 1 && d->KW == 1));
  if (dir == DIR_BWD_DATA) return d->C >= 32;
  return d->C * d->KH * d->KW >= 256 || (d->KH == 1 && d->KW == 1);
}

int ts__conv_dnnl_get_lp_mode(int dir) { return dir >= 0 && dir < 3 ? g_lp_mode[dir] : -1; }

/* Whether the f32 default would run Winograd for d (3x3 stride 1, undilated, ungrouped, >= 32
 * channels in and out). */
static int wino_shape(const ts__conv_desc *d) {
  return d->KH == 3 && d->KW == 3 && d->sh == 1 && d->sw == 1 && d->dh == 1 && d->dw == 1 && d->groups == 1 &&
         d->C >= 32 && d->O >= 32;
}

/* Whether bf16 direction dir of d runs an f32 primitive between converting reorders (the
 * TS_CONV_LP_DEFAULT rule, conv.h): backward-weights of the ungrouped spatial (not 1x1) layers
 * with >= 32 channels in and out, when oneDNN runs more than one thread. There oneDNN 2.6's bf16
 * kernel (jit_bf16:avx512_core_bf16) splits the reduction over the minibatch between the threads
 * and joins them with spinning barriers: with 2 threads on a machine where another process wants
 * a core, one thread spins while the other waits for the CPU, and a ResNet-18 step's
 * backward-weights went from 107 ms to 2,070 ms (the f32 kernels, Winograd and direct, slowed by
 * the same 2.7x as everything else); on a quiet machine it is only ~1.1x the f32 one. On one
 * thread there is no barrier and the bf16 kernel is the faster (docs/mixed-precision.md,
 * "Convolutions at O2"). The 1x1 kernel (jit_bf16_1x1) and thin layers (the RGB stem) keep bf16. */
static int lp_wants_f32(const ts__conv_desc *d, int dir) {
  if (g_lp_mode[dir] != TS_CONV_LP_DEFAULT) return g_lp_mode[dir] == TS_CONV_LP_F32;
  return dir == 2 && d->groups == 1 && (d->KH > 1 || d->KW > 1) && d->C >= 32 && d->O >= 32 &&
         !omp_in_parallel() && omp_get_max_threads() > 1;
}

static void make_key(conv_key *k, const ts__conv_desc *d, int dir, int fmt, int with_bias,
                     dnnl_data_type_t dt) {
  memset(k, 0, sizeof *k);
  memcpy(k->tag, "conv2d", 7);
  k->dir = dir, k->fmt = fmt, k->with_bias = with_bias, k->alg = g_alg[dir], k->dt = (int32_t)dt;
  k->pdt = (int32_t)(dt == dnnl_bf16 && lp_wants_f32(d, dir) ? dnnl_f32 : dt);
  if (k->alg == TS_CONV_ALG_DEFAULT && k->pdt != dnnl_f32) k->alg = TS_CONV_ALG_DIRECT; /* no bf16 Winograd */
  if (k->alg == TS_CONV_ALG_DEFAULT) k->alg = wino_shape(d) ? TS_CONV_ALG_WINOGRAD : TS_CONV_ALG_DIRECT;
  k->N = d->N, k->C = d->C, k->H = d->H, k->W = d->W, k->O = d->O, k->KH = d->KH, k->KW = d->KW;
  k->OH = d->OH, k->OW = d->OW, k->sh = d->sh, k->sw = d->sw, k->ph = d->ph, k->pw = d->pw;
  k->dh = d->dh, k->dw = d->dw, k->groups = d->groups;
}

/* Plain descriptors of x, w, b, y (all of data type dt). Weights are 5-D goihw when grouped
 * (same memory as OIHW). */
static int plain_mds(const ts__conv_desc *d, dnnl_data_type_t dt, dnnl_memory_desc_t *x,
                     dnnl_memory_desc_t *w, dnnl_memory_desc_t *b, dnnl_memory_desc_t *y) {
  int64_t xd[4] = {d->N, d->C, d->H, d->W}, yd[4] = {d->N, d->O, d->OH, d->OW};
  int64_t g = d->groups, bd[1] = {d->O};
  int64_t wd4[4] = {d->O, d->C / g, d->KH, d->KW};
  int64_t wd5[5] = {g, d->O / g, d->C / g, d->KH, d->KW};
  int rc;
  if ((rc = ts__dnnl_md_plain(x, 4, xd, dt)) || (rc = ts__dnnl_md_plain(y, 4, yd, dt)) ||
      (rc = ts__dnnl_md_plain(b, 1, bd, dt)))
    return rc;
  return g > 1 ? ts__dnnl_md_plain(w, 5, wd5, dt) : ts__dnnl_md_plain(w, 4, wd4, dt);
}

static int any_md(dnnl_memory_desc_t *out, const dnnl_memory_desc_t *plain) {
  return ts__dnnl_check(
      dnnl_memory_desc_init_by_tag(out, plain->ndims, plain->dims, plain->data_type, dnnl_format_tag_any),
      "conv2d memory descriptor");
}

/* Fills a convolution op descriptor for `dir` from the given memory descriptors. */
static int conv_desc(dnnl_convolution_desc_t *cd, int dir, dnnl_alg_kind_t alg, const ts__conv_desc *d,
                     const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                     const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *y) {
  dnnl_dims_t strides = {d->sh, d->sw}, dil = {d->dh - 1, d->dw - 1}, pad = {d->ph, d->pw};
  dnnl_status_t st;
  if (dir == DIR_FWD)
    st = dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training,
                                                    alg, x, w, b, y, strides,
                                                    dil, pad, pad);
  else if (dir == DIR_BWD_DATA)
    st = dnnl_dilated_convolution_backward_data_desc_init(cd, alg, x, w, y,
                                                          strides, dil, pad, pad);
  else
    st = dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, x, w, b,
                                                             y, strides, dil, pad, pad);
  return ts__dnnl_check(st, "conv2d descriptor");
}

static ts__dnnl_prim *get_prim(const ts__conv_desc *d, int dir, int with_bias, dnnl_data_type_t dt,
                               conv_key *key) {
  const int fmt = g_fmt[dir];
  make_key(key, d, dir, fmt, with_bias, dt);
  ts__dnnl_prim *p = ts__dnnl_cache_get(key, sizeof *key);
  if (p) return p;

  /* p*: plain in the primitive's dtype (what it runs on in PLAIN mode); c*: plain in the
   * caller's dtype (the user side of the reorders; the same as p* unless bf16 runs on f32) */
  dnnl_memory_desc_t px, pw, pb, py, ax, aw, ay, cx, cw, cb, cy;
  if (plain_mds(d, (dnnl_data_type_t)key->pdt, &px, &pw, &pb, &py) || plain_mds(d, dt, &cx, &cw, &cb, &cy))
    return NULL;
  const dnnl_memory_desc_t *ux = &px, *uw = &pw, *uy = &py;
  if (fmt == TS_CONV_FMT_ANY) {
    if (any_md(&ax, &px) || any_md(&aw, &pw) || any_md(&ay, &py)) return NULL;
    ux = &ax, uw = &aw, uy = &ay;
  }
  const dnnl_memory_desc_t *bias = with_bias ? &pb : NULL;
  dnnl_primitive_desc_t pd = NULL;
  /* Winograd (when asked for) exists only for some shapes: fall back to direct. */
  const dnnl_alg_kind_t algs[2] = {key->alg == TS_CONV_ALG_WINOGRAD ? dnnl_convolution_winograd
                                   : key->alg == TS_CONV_ALG_AUTO   ? dnnl_convolution_auto
                                                                    : dnnl_convolution_direct,
                                   dnnl_convolution_direct};
  dnnl_status_t st = dnnl_unimplemented;
  for (int ai = 0; ai < 2 && !pd; ai++) {
    if (ai == 1 && algs[0] == dnnl_convolution_direct) break;
    dnnl_convolution_desc_t cd, fd;
    dnnl_primitive_desc_t hint = NULL;
    st = dnnl_invalid_arguments;
    if (conv_desc(&cd, dir, algs[ai], d, ux, uw, dir == DIR_BWD_DATA ? NULL : bias, uy)) continue;
    /* backward primitives need the forward primitive as a hint */
    if (dir != DIR_FWD && (conv_desc(&fd, DIR_FWD, algs[ai], d, ux, uw, bias, uy) ||
                           dnnl_primitive_desc_create(&hint, &fd, NULL, ts__dnnl_engine(),
                                                      NULL) != dnnl_success))
      continue;
    st = dnnl_primitive_desc_create(&pd, &cd, NULL, ts__dnnl_engine(), hint);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success) pd = NULL;
  }
  if (!pd) {
    if (st == dnnl_success) st = dnnl_runtime_error;
    ts__dnnl_check(st, "conv2d primitive descriptor");
    return NULL;
  }

  conv_aux *aux = calloc(1, sizeof *aux);
  if (!aux) {
    dnnl_primitive_desc_destroy(pd);
    ts_error_set(TS_ENOMEM, "conv2d: out of memory");
    return NULL;
  }
  static const dnnl_query_t q[3][NSLOT] = {
      {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_weights_md, dnnl_query_dst_md},
      {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_undef, dnnl_query_diff_src_md},
      {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md,
       dnnl_query_diff_weights_md}};
  static const int qi[3][NSLOT] = {{0, 0, 1, 0}, {0, 0, 0, 0}, {0, 0, 1, 0}};
  static const int args[3][NSLOT] = {
      {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST},
      {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, 0, DNNL_ARG_DIFF_SRC},
      {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_BIAS, DNNL_ARG_DIFF_WEIGHTS}};
  const dnnl_memory_desc_t *user[3][NSLOT] = {
      {&cx, &cw, &cb, &cy}, {&cy, &cw, NULL, &cx}, {&cx, &cy, &cb, &cw}};
  for (int s = 0; s < NSLOT; s++) {
    if (!args[dir][s] || (s == 2 && !with_bias)) continue;
    aux->arg[s] = args[dir][s];
    aux->is_out[s] = s == 3 || (dir == DIR_BWD_WEIGHT && s == 2);
    aux->user[s] = *user[dir][s];
    const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, q[dir][s], qi[dir][s]);
    aux->prim[s] = m ? *m : *user[dir][s];
    aux->reorder[s] = !dnnl_memory_desc_equal(&aux->prim[s], &aux->user[s]);
  }
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    strncpy(aux->impl, impl, sizeof aux->impl - 1);

  dnnl_primitive_t prim = NULL;
  if (ts__dnnl_check(dnnl_primitive_create(&prim, pd), "conv2d primitive creation")) {
    dnnl_primitive_desc_destroy(pd);
    free(aux);
    return NULL;
  }
  p = ts__dnnl_cache_put(key, sizeof *key, pd, prim, aux);
  if (!p) ts_error_set(TS_ENOMEM, "conv2d: primitive cache out of memory");
  return p;
}

static ts__dnnl_prim *get_reorder(const conv_key *ck, int slot, const dnnl_memory_desc_t *src,
                                  const dnnl_memory_desc_t *dst) {
  reorder_key k;
  memset(&k, 0, sizeof k);
  memcpy(k.tag, "reorder", 8);
  k.conv = *ck;
  k.slot = slot;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&k, sizeof k);
  if (p) return p;
  dnnl_primitive_desc_t pd = NULL;
  if (ts__dnnl_check(dnnl_reorder_primitive_desc_create(&pd, src, ts__dnnl_engine(), dst,
                                                        ts__dnnl_engine(), NULL),
                     "conv2d reorder primitive descriptor"))
    return NULL;
  return ts__dnnl_cache_put_pd(&k, sizeof k, pd);
}

static int reorder(const conv_key *ck, int slot, const dnnl_memory_desc_t *smd, const void *src,
                   const dnnl_memory_desc_t *dmd, void *dst) {
  ts__dnnl_prim *r = get_reorder(ck, slot, smd, dmd);
  if (!r) return TS_EBACKEND;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, ts__dnnl_mem(smd, (void *)src)},
                          {DNNL_ARG_TO, ts__dnnl_mem(dmd, dst)}};
  return ts__dnnl_run(r, 2, a, "conv2d reorder");
}

/* Runs direction `dir` with user buffers per slot (NULL for an absent bias). */
static int run_conv(const ts__conv_desc *d, int dir, dnnl_data_type_t dt, void *const bufs[NSLOT],
                    const char *what) {
  int rc = ts__conv_check(d, what);
  if (rc) return rc;
  for (int s = 0; s < NSLOT; s++)
    if (s != 2 && !bufs[s])
      return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  const int with_bias = dir != DIR_BWD_DATA && bufs[2] != NULL;
  conv_key key;
  ts__dnnl_prim *pp = get_prim(d, dir, with_bias, dt, &key);
  if (!pp) return ts_error_wrap(TS_EBACKEND, "%s", what);
  /* Copy the entry: inserting reorder primitives below may grow the cache and move entries
   * (the primitives themselves stay valid). */
  ts__dnnl_prim p = *pp;
  const conv_aux *aux = p.aux;
  void *pb[NSLOT] = {0};
  double *st = g_stat[dt != dnnl_f32][dir], t0 = ts_time_now(), t1;
  for (int s = 0; s < NSLOT; s++) {
    if (!aux->arg[s]) continue;
    pb[s] = bufs[s];
    if (!aux->reorder[s]) continue;
    pb[s] = scratch(s, dnnl_memory_desc_get_size(&aux->prim[s]));
    if (!pb[s]) return ts_error_set(TS_ENOMEM, "%s: out of memory for layout buffers", what);
    if (!aux->is_out[s] && (rc = reorder(&key, s, &aux->user[s], bufs[s], &aux->prim[s], pb[s])))
      return rc;
  }
  dnnl_exec_arg_t args[NSLOT];
  int na = 0;
  for (int s = 0; s < NSLOT; s++)
    if (aux->arg[s]) {
      args[na].arg = aux->arg[s];
      args[na].memory = ts__dnnl_mem(&aux->prim[s], pb[s]);
      na++;
    }
  t1 = ts_time_now();
  st[0] += t1 - t0;
  if ((rc = ts__dnnl_run(&p, na, args, what))) return rc;
  t0 = ts_time_now();
  st[1] += t0 - t1;
  for (int s = 0; s < NSLOT; s++)
    if (aux->arg[s] && aux->reorder[s] && aux->is_out[s] &&
        (rc = reorder(&key, NSLOT + s, &aux->prim[s], pb[s], &aux->user[s], bufs[s])))
      return rc;
  st[2] += ts_time_now() - t0;
  return TS_OK;
}

int ts__conv2d_fwd_dnnl(const ts__conv_desc *d, const float *x, const float *w, const float *b,
                        float *y) {
  void *bufs[NSLOT] = {(void *)x, (void *)w, (void *)b, y};
  return run_conv(d, DIR_FWD, dnnl_f32, bufs, "conv2d (oneDNN)");
}

int ts__conv2d_bwd_data_dnnl(const ts__conv_desc *d, const float *dy, const float *w, float *dx) {
  void *bufs[NSLOT] = {(void *)dy, (void *)w, NULL, dx};
  return run_conv(d, DIR_BWD_DATA, dnnl_f32, bufs, "conv2d_bwd_data (oneDNN)");
}

int ts__conv2d_bwd_weight_dnnl(const ts__conv_desc *d, const float *x, const float *dy,
                               float *dw, float *db) {
  void *bufs[NSLOT] = {(void *)x, (void *)dy, db, dw};
  return run_conv(d, DIR_BWD_WEIGHT, dnnl_f32, bufs, "conv2d_bwd_weight (oneDNN)");
}

const char *ts__conv_dnnl_impl(const ts__conv_desc *d, int dir) {
  if (dir < 0 || dir > 2 || ts__conv_check(d, "conv2d")) return "";
  conv_key key;
  ts__dnnl_prim *p = get_prim(d, dir, 0, dnnl_f32, &key);
  return p && p->aux ? ((const conv_aux *)p->aux)->impl : "";
}

/* ---------------------------------------------------------------- 16-bit (conv.h) */

const char *ts__conv_dnnl_impl_bf16(const ts__conv_desc *d, int dir) {
  if (dir < 0 || dir > 2 || ts__conv_check(d, "conv2d")) return "";
  if (lp_wants_wino(d, dir)) return TS_CONV_WINO_IMPL;
  if (lp_wants_gemm(d, dir)) return TS_CONV_GEMM_IMPL;
  if (!ts__dnnl_bf16()) return "converted"; /* conv_lp: f32 on widened values */
  conv_key key;
  ts__dnnl_prim *p = get_prim(d, dir, 0, dnnl_bf16, &key);
  return p && p->aux ? ((const conv_aux *)p->aux)->impl : "";
}

/* Output size (elements) of slot s of direction dir: y, dx, dw, db. */
static int64_t nx(const ts__conv_desc *d) { return d->N * d->C * d->H * d->W; }
static int64_t ny(const ts__conv_desc *d) { return d->N * d->O * d->OH * d->OW; }
static int64_t nw(const ts__conv_desc *d) { return d->O * (d->C / d->groups) * d->KH * d->KW; }

/* The converted route's f32 copies, kept between calls as the oneDNN route's reorders are (the
 * f32 kernels it calls use those): fresh allocations cost their page faults on every call
 * (ResNet-20's bf16 convolutions on an AVX2 CPU took 1.6 times their f32 time with them). */
static void *g_cbuf[NSLOT];
static size_t g_ccap[NSLOT];

/* Converts the 16-bit inputs to f32, runs the f32 kernel of direction dir (reference or
 * oneDNN), rounds the outputs once. bufs as run_conv's slots. */
static int conv_converted(const ts__conv_desc *d, int dir, ts_dtype dt, void *const bufs[NSLOT],
                          int dnnl, const char *what) {
  int rc = ts__conv_check(d, what);
  if (rc) return rc;
  /* element counts per slot: fwd (x, w, b, y), bwd_data (dy, w, -, dx), bwd_weight (x, dy, db, dw) */
  const int64_t cnt[3][NSLOT] = {{nx(d), nw(d), d->O, ny(d)}, {ny(d), nw(d), 0, nx(d)}, {nx(d), ny(d), d->O, nw(d)}};
  const int is_out[3][NSLOT] = {{0, 0, 0, 1}, {0, 0, 0, 1}, {0, 0, 1, 1}};
  float *f[NSLOT] = {0};
  for (int s = 0; s < NSLOT && rc == TS_OK; s++) {
    if (!bufs[s] || !cnt[dir][s]) continue;
    f[s] = ts__scratch_grow(&g_cbuf[s], &g_ccap[s], sizeof(float) * (size_t)cnt[dir][s]);
    if (!f[s])
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory for an f32 copy of %lld elements", what, (long long)cnt[dir][s]);
    else if (!is_out[dir][s])
      ts__lp_to_f32(bufs[s], dt, f[s], cnt[dir][s]);
  }
  if (rc == TS_OK) {
    if (dir == DIR_FWD)
      rc = dnnl ? ts__conv2d_fwd_dnnl(d, f[0], f[1], f[2], f[3]) : ts__conv2d_fwd_ref(d, f[0], f[1], f[2], f[3]);
    else if (dir == DIR_BWD_DATA)
      rc = dnnl ? ts__conv2d_bwd_data_dnnl(d, f[0], f[1], f[3]) : ts__conv2d_bwd_data_ref(d, f[0], f[1], f[3]);
    else
      rc = dnnl ? ts__conv2d_bwd_weight_dnnl(d, f[0], f[1], f[3], f[2])
                : ts__conv2d_bwd_weight_ref(d, f[0], f[1], f[3], f[2]);
  }
  for (int s = 0; s < NSLOT; s++)
    if (rc == TS_OK && f[s] && is_out[dir][s]) ts__lp_from_f32(f[s], bufs[s], dt, cnt[dir][s]);
  return rc;
}

static int conv_lp(const ts__conv_desc *d, int dir, ts_dtype dt, void *const bufs[NSLOT], int dnnl,
                   const char *what) {
  for (int s = 0; s < NSLOT; s++)
    if (s != 2 && !bufs[s]) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  if (dnnl && dt == TS_BF16 && lp_wants_wino(d, dir)) {
    int rc = ts__conv_check(d, what);
    if (rc) return rc;
    double *st = g_stat[1][dir];
    if (dir == DIR_FWD) return ts__conv2d_fwd_wino(d, bufs[0], bufs[1], bufs[2], bufs[3], st);
    if (dir == DIR_BWD_DATA) return ts__conv2d_bwd_data_wino(d, bufs[0], bufs[1], bufs[3], st);
    return ts__conv2d_bwd_weight_wino(d, bufs[0], bufs[1], bufs[3], bufs[2], st);
  }
  if (dnnl && dt == TS_BF16 && lp_wants_gemm(d, dir)) {
    const double t0 = ts_time_now();
    const int rc = dir == DIR_FWD        ? ts__conv2d_fwd_gemm(d, bufs[0], bufs[1], bufs[2], bufs[3])
                   : dir == DIR_BWD_DATA ? ts__conv2d_bwd_data_gemm(d, bufs[0], bufs[1], bufs[3])
                                         : ts__conv2d_bwd_weight_gemm(d, bufs[0], bufs[1], bufs[3], bufs[2]);
    g_stat[1][dir][1] += ts_time_now() - t0;
    return rc;
  }
  if (dnnl && dt == TS_BF16 && ts__dnnl_bf16()) return run_conv(d, dir, dnnl_bf16, bufs, what);
  return conv_converted(d, dir, dt, bufs, dnnl, what);
}

int ts__conv2d_fwd_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *x, const void *w,
                      const void *b, void *y) {
  void *bufs[NSLOT] = {(void *)x, (void *)w, (void *)b, y};
  return conv_lp(d, DIR_FWD, dt, bufs, dnnl, dnnl ? "conv2d (16-bit, oneDNN)" : "conv2d (16-bit, ref)");
}

int ts__conv2d_bwd_data_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *dy,
                           const void *w, void *dx) {
  void *bufs[NSLOT] = {(void *)dy, (void *)w, NULL, dx};
  return conv_lp(d, DIR_BWD_DATA, dt, bufs, dnnl,
                 dnnl ? "conv2d_bwd_data (16-bit, oneDNN)" : "conv2d_bwd_data (16-bit, ref)");
}

int ts__conv2d_bwd_weight_lp(const ts__conv_desc *d, ts_dtype dt, int dnnl, const void *x,
                             const void *dy, void *dw, void *db) {
  void *bufs[NSLOT] = {(void *)x, (void *)dy, db, dw};
  return conv_lp(d, DIR_BWD_WEIGHT, dt, bufs, dnnl,
                 dnnl ? "conv2d_bwd_weight (16-bit, oneDNN)" : "conv2d_bwd_weight (16-bit, ref)");
}
