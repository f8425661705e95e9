/* Collectives and point-to-point transfers. Each is one issue function that fills a ts_comm_req
 * and makes the MPI call: the non-blocking one (MPI_Iallreduce, ...) for the non-blocking forms
 * and for blocking forms on polled communicators, which then wait for it under the timeout
 * (comm.c); MPI's blocking one (MPI_Allreduce, ...) for blocking forms on native communicators
 * (ts_comm_set_blocking), with the watchdog armed around it (watchdog.c). Either way the same
 * stage functions finish the work (a MEAN's division, a bf16/f16 stage).
 *
 * bf16/f16 reductions: 16-bit data on the wire, f32 accumulation in rank order, one rounding
 * (see comm.h): stage 1 is an all-to-all that brings every rank's copy of block r to rank r,
 * the local sum runs when stage 1 completes (inside ts_comm_test / wait, or right after the
 * native call), and for allreduce stage 2 is an in-place allgatherv of the reduced blocks. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

static ts_coll_sig mksig(ts_comm *c, int kind, int op, ts_dtype dt, int64_t count, int root) {
  ts_coll_sig s;
  memset(&s, 0, sizeof s);
  s.seq = c ? c->seq : 0;
  s.kind = kind;
  s.op = op;
  s.dtype = (int32_t)dt;
  s.count = count;
  s.shown = count < 0 ? 0 : count;
  s.root = root;
  return s;
}

static int is16(ts_dtype dt) { return dt == TS_BF16 || dt == TS_F16; }

/* Common argument checks; `reduce`: dtype and op must allow a reduction. */
static int check_args(ts_comm *c, const ts_coll_sig *s, ts_dtype dt, int reduce, ts_reduce_op op) {
  int rc = ts__comm_usable(c, s);
  if (rc) return rc;
  if (ts_dtype_size(dt) == 0) return ts__arg_fail(c, TS_EDTYPE, s, "invalid dtype");
  if (reduce) {
    if (dt == TS_U8)
      return ts__arg_fail(c, TS_EDTYPE, s, "u8 cannot be reduced (f32, bf16, f16, i32, i64 can)");
    if ((unsigned)op >= TS_REDUCE_COUNT) return ts__arg_fail(c, TS_EINVAL, s, "invalid reduce op");
  }
  return TS_OK;
}

static int check_count(ts_comm *c, const ts_coll_sig *s, size_t n, const char *what) {
  if (n > (size_t)INT_MAX) {
    char m[128];
    snprintf(m, sizeof m, "%s %zu exceeds the MPI limit of %d elements", what, n, INT_MAX);
    return ts__arg_fail(c, TS_ERANGE, s, m);
  }
  return TS_OK;
}

static int check_buf(ts_comm *c, const ts_coll_sig *s, const void *p, size_t n, const char *what) {
  if (n > 0 && !p) {
    char m[96];
    snprintf(m, sizeof m, "%s buffer is NULL", what);
    return ts__arg_fail(c, TS_EINVAL, s, m);
  }
  return TS_OK;
}

static int overlap(const void *a, size_t abytes, const void *b, size_t bbytes) {
  if (!a || !b || !abytes || !bbytes) return 0;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bbytes && y < x + abytes;
}

/* blocking: for a blocking form (native when c's mode says so). */
static ts_comm_req *new_req(ts_comm *c, const ts_coll_sig *s, int nints, int blocking) {
  ts_comm_req *r = ts__req_new(c, s);
  if (!r) return NULL;
  r->native = blocking && ts__comm_native(c);
  if (r->native) r->sig.flags |= TS__SIG_NATIVE;
  if (nints > 0) {
    r->iarr = malloc((size_t)nints * sizeof(int));
    if (!r->iarr) {
      ts__req_release(r);
      return NULL;
    }
  }
  return r;
}

static int oom(ts_comm *c, const ts_coll_sig *s) {
  return ts__arg_fail(c, TS_ENOMEM, s, "out of memory");
}

/* Numbers (and, debugging, checks) r's collective, then arms a native request's deadline: call
 * right before the MPI call, and hand its result to issued(). */
static int begin(ts_comm_req *r) {
  int rc = ts__coll_begin(r->c, &r->sig);
  if (!rc && r->native) rc = ts__watchdog_arm(r->c, &r->sig);
  return rc;
}

/* After the MPI call (`mrc`, its return code; fn: its name, native or non-blocking): disarms a
 * native request's deadline; cleans up on failure; hands out the request. */
static int issued(ts_comm_req *r, int mrc, const char *fn, ts_comm_req **out) {
  if (r->native) ts__watchdog_disarm(r->c);
  if (mrc != MPI_SUCCESS) {
    int rc = ts__mpi_fail(r->c, &r->sig, mrc, fn);
    ts__req_release(r);
    return rc;
  }
  *out = r;
  return TS_OK;
}

/* ---- local reduction helpers ---- */
static MPI_Op mpi_op(ts_reduce_op op) {
  switch (op) {
    case TS_REDUCE_MAX: return MPI_MAX;
    case TS_REDUCE_MIN: return MPI_MIN;
    default: return MPI_SUM; /* SUM and MEAN */
  }
}

/* MEAN for native dtypes: the MPI sum divided by the size. */
static int stage_mean(ts_comm_req *r) {
  size_t n = r->n_local;
  int p = r->c->size;
  switch (r->dtype) {
    case TS_F32: {
      float *x = (float *)r->recv + r->off_local;
      for (size_t i = 0; i < n; i++) x[i] = x[i] / (float)p;
      break;
    }
    case TS_I32: {
      int32_t *x = (int32_t *)r->recv + r->off_local;
      for (size_t i = 0; i < n; i++) x[i] = x[i] / p;
      break;
    }
    case TS_I64: {
      int64_t *x = (int64_t *)r->recv + r->off_local;
      for (size_t i = 0; i < n; i++) x[i] = x[i] / p;
      break;
    }
    default: break;
  }
  r->done = 1;
  return TS_OK;
}

/* Conversions with exactly the results of ts_bf16_to_f32 / ts_f32_to_bf16 / ts_f16_to_f32 /
 * ts_f32_to_f16 (round to nearest even; NaN -> quiet NaN), written without branches so the
 * loops below vectorise (f16 after F. Giesen's half <-> float conversions). */
static inline uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float bf16_f32(uint16_t h) { return bits_f((uint32_t)h << 16); }
static inline uint16_t f32_bf16(float f) {
  uint32_t u = f_bits(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : r);
}
static inline float f16_f32(uint16_t h) {
  /* no subnormal f32 intermediates, so flush-to-zero / denormals-are-zero modes do no harm */
  uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
  uint32_t e = o & 0x0f800000u;
  o += 0x38000000u;                                           /* rebias 15 -> 127 */
  float sub = bits_f(o + 0x00800000u) - 0x1p-14f;             /* subnormal: exact */
  uint32_t r = e == 0x0f800000u ? o + 0x38000000u : (e == 0 ? f_bits(sub) : o); /* inf/NaN */
  return bits_f(r | ((uint32_t)(h & 0x8000u) << 16));
}
static inline uint16_t f32_f16(float x) {
  uint32_t u = f_bits(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  /* subnormal results: adding 0.5 (2^-1) lets the FPU round at the 2^-24 unit */
  uint32_t sub = f_bits(bits_f(a) + 0.5f) - 0x3f000000u;
  uint32_t nrm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15, RNE */
  uint32_t o = a < 0x38800000u ? sub : nrm;
  o = a >= 0x47800000u ? (a > 0x7f800000u ? 0x7e00u : 0x7c00u) : o;
  return (uint16_t)(o | sign);
}

static inline void load_row(ts_dtype dt, const uint16_t *row, float *v, size_t m) {
  if (dt == TS_BF16) {
#pragma omp simd
    for (size_t k = 0; k < m; k++) v[k] = bf16_f32(row[k]);
  } else {
#pragma omp simd
    for (size_t k = 0; k < m; k++) v[k] = f16_f32(row[k]);
  }
}

/* out[k] = op over i < n of in[i*b + k], accumulated in f32 in rank order, rounded once. */
static void reduce16(const uint16_t *in, int n, size_t b, uint16_t *out, ts_dtype dt, ts_reduce_op op) {
  enum { CH = 1024 };
  float acc[CH], v[CH];
  for (size_t k0 = 0; k0 < b; k0 += CH) {
    size_t m = b - k0 < CH ? b - k0 : CH;
    load_row(dt, in + k0, acc, m);
    for (int i = 1; i < n; i++) {
      load_row(dt, in + (size_t)i * b + k0, v, m);
      if (op == TS_REDUCE_SUM || op == TS_REDUCE_MEAN) {
#pragma omp simd
        for (size_t k = 0; k < m; k++) acc[k] += v[k];
      } else if (op == TS_REDUCE_MAX) { /* NaN propagates */
#pragma omp simd
        for (size_t k = 0; k < m; k++) acc[k] = (v[k] != v[k] || v[k] > acc[k]) ? v[k] : acc[k];
      } else {
#pragma omp simd
        for (size_t k = 0; k < m; k++) acc[k] = (v[k] != v[k] || v[k] < acc[k]) ? v[k] : acc[k];
      }
    }
    if (op == TS_REDUCE_MEAN) {
      float fn = (float)n;
#pragma omp simd
      for (size_t k = 0; k < m; k++) acc[k] = acc[k] / fn;
    }
    uint16_t *o = out + k0;
    if (dt == TS_BF16) {
#pragma omp simd
      for (size_t k = 0; k < m; k++) o[k] = f32_bf16(acc[k]);
    } else {
#pragma omp simd
      for (size_t k = 0; k < m; k++) o[k] = f32_f16(acc[k]);
    }
  }
}


/* bf16/f16 reduce-scatter: stage 1 (all-to-all) done, reduce into recv. */
static int stage_rs16(ts_comm_req *r) {
  reduce16(r->tmp, r->c->size, r->n_local, (uint16_t *)r->recv + r->off_local, r->dtype, r->op);
  r->done = 1;
  return TS_OK;
}

/* bf16/f16 allreduce: stage 1 reduce, then stage 2 allgatherv in place; iarr = counts, displs.
 * Non-blocking, stage 2 goes on mc2 in the order of c's stage-2 queue; native, on mc itself
 * right away (the order of native calls is the program's, the same on every rank). */
static int stage_ar16(ts_comm_req *r) {
  if (r->stage == 1) {
    reduce16(r->tmp, r->c->size, r->n_local, (uint16_t *)r->recv + r->off_local, r->dtype, r->op);
    int p = r->c->size, mrc;
    r->mr = MPI_REQUEST_NULL;
    if (r->native) {
      int rc = ts__watchdog_arm(r->c, &r->sig);
      if (rc) return rc;
      mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->recv, r->iarr, r->iarr + p, MPI_UINT16_T,
                           r->c->mc);
      ts__watchdog_disarm(r->c);
    } else {
      mrc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->recv, r->iarr, r->iarr + p, MPI_UINT16_T,
                            r->c->mc2, &r->mr);
    }
    if (mrc != MPI_SUCCESS) return ts__mpi_fail(r->c, &r->sig, mrc, r->native ? "MPI_Allgatherv" : "MPI_Iallgatherv");
    return TS_OK;
  }
  r->done = 1;
  return TS_OK;
}

/* ---- issue functions (shared by blocking and non-blocking forms) ---- */

static int issue_allreduce(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dt,
                           ts_reduce_op op, int blocking, ts_comm_req **out) {
  ts_coll_sig s = mksig(c, TS_COLL_ALLREDUCE, (int)op, dt, (int64_t)count, -1);
  int rc = check_args(c, &s, dt, 1, op);
  if (!rc) rc = check_count(c, &s, count, "count");
  if (!rc) rc = check_buf(c, &s, send, count, "send");
  if (!rc) rc = check_buf(c, &s, recv, count, "recv");
  if (rc) return rc;
  size_t esz = ts_dtype_size(dt), bytes = count * esz;
  int inplace = send == recv;
  if (!inplace && overlap(send, bytes, recv, bytes))
    return ts__arg_fail(c, TS_EINVAL, &s, "send and recv overlap (in place needs send == recv)");
  int p = c->size, me = c->rank;
  ts_comm_req *r = new_req(c, &s, is16(dt) ? 4 * p : 0, blocking);
  if (!r) return oom(c, &s);
  r->dtype = dt;
  r->op = op;
  r->send = send;
  r->recv = recv;
  if (!is16(dt)) {
    r->n_local = count;
    r->off_local = 0;
    r->on_stage = op == TS_REDUCE_MEAN ? stage_mean : NULL;
    if ((rc = begin(r))) {
      ts__req_release(r);
      return rc;
    }
    const void *sb = inplace ? MPI_IN_PLACE : send;
    MPI_Datatype mdt = ts__mpi_dtype(dt);
    int mrc = r->native ? MPI_Allreduce(sb, recv, (int)count, mdt, mpi_op(op), c->mc)
                        : MPI_Iallreduce(sb, recv, (int)count, mdt, mpi_op(op), c->mc, &r->mr);
    return issued(r, mrc, r->native ? "MPI_Allreduce" : "MPI_Iallreduce", out);
  }
  /* 16-bit: blocks of the even split; iarr = [counts | displs | rcounts | rdispls] */
  int *sc = r->iarr, *sd = sc + p, *rcn = sd + p, *rd = rcn + p;
  size_t q = count / (size_t)p, rem = count % (size_t)p, off = 0;
  for (int i = 0; i < p; i++) {
    sc[i] = (int)(q + ((size_t)i < rem ? 1 : 0));
    sd[i] = (int)off;
    off += (size_t)sc[i];
  }
  size_t b = (size_t)sc[me];
  for (int i = 0; i < p; i++) {
    rcn[i] = (int)b;
    rd[i] = (int)((size_t)i * b);
  }
  r->n_local = b;
  r->off_local = (size_t)sd[me];
  r->tmp = malloc(b * (size_t)p * 2 + 2);
  if (!r->tmp) {
    ts__req_release(r);
    return oom(c, &s);
  }
  r->on_stage = stage_ar16;
  if ((!r->native && (rc = ts__comm_stage2_ready(c, &r->sig))) || (rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  int mrc = r->native ? MPI_Alltoallv(send, sc, sd, MPI_UINT16_T, r->tmp, rcn, rd, MPI_UINT16_T, c->mc)
                      : MPI_Ialltoallv(send, sc, sd, MPI_UINT16_T, r->tmp, rcn, rd, MPI_UINT16_T, c->mc, &r->mr);
  rc = issued(r, mrc, r->native ? "MPI_Alltoallv" : "MPI_Ialltoallv", out);
  if (!rc && !r->native) ts__req_enqueue_stage2(r);
  return rc;
}

/* In place (native dtypes): MPI_IN_PLACE leaves the rank's reduced block at the start of the
 * buffer; the mean (if any) is taken there, then the block moves to the rank's own place. */
static int stage_rs_inplace(ts_comm_req *r) {
  int rc = r->op == TS_REDUCE_MEAN ? stage_mean(r) : TS_OK;
  size_t esz = ts_dtype_size(r->dtype);
  if (r->move_to && r->n_local) memmove((char *)r->recv + r->move_to * esz, r->recv, r->n_local * esz);
  r->done = 1;
  return rc;
}

/* counts == NULL: equal blocks of `block` elements (reduce_scatter_block). In place when recv ==
 * send + the rank's block offset (its prefix sum of counts): the rank's reduced block is written
 * at its own place in send, the rest of send is left undefined. */
static int issue_reduce_scatter(ts_comm *c, const void *send, void *recv, const size_t *counts,
                                size_t block, ts_dtype dt, ts_reduce_op op, int blocking, ts_comm_req **out) {
  int kind = counts ? TS_COLL_REDUCE_SCATTER : TS_COLL_REDUCE_SCATTER_BLOCK;
  int p = c ? c->size : 0, me = c ? c->rank : 0;
  size_t total = 0;
  if (c && counts)
    for (int i = 0; i < p; i++) total += counts[i];
  else if (c)
    total = block * (size_t)p;
  ts_coll_sig s = mksig(c, kind, (int)op, dt, (int64_t)(counts ? total : block), -1);
  int rc = check_args(c, &s, dt, 1, op);
  if (rc) return rc;
  size_t mine = counts ? counts[me] : block;
  if ((rc = check_count(c, &s, total, "total count"))) return rc;
  if ((rc = check_buf(c, &s, send, total, "send")) || (rc = check_buf(c, &s, recv, mine, "recv")))
    return rc;
  size_t esz = ts_dtype_size(dt), mydispl = 0;
  for (int i = 0; i < me; i++) mydispl += counts ? counts[i] : block;
  int inplace = recv == (const char *)send + mydispl * esz;
  if (!inplace && overlap(send, total * esz, recv, mine * esz))
    return ts__arg_fail(c, TS_EINVAL, &s, "send and recv overlap (in place needs recv == send + the rank's block offset)");
  ts_comm_req *r = new_req(c, &s, counts || is16(dt) ? 4 * p : 0, blocking);
  if (!r) return oom(c, &s);
  r->dtype = dt;
  r->op = op;
  r->send = send;
  r->recv = recv;
  r->n_local = mine;
  r->off_local = 0;
  if (!is16(dt)) {
    r->on_stage = op == TS_REDUCE_MEAN ? stage_mean : NULL;
    const void *sb = send;
    if (inplace) { /* MPI's result lands at the buffer's start: moved to the rank's place after */
      sb = MPI_IN_PLACE;
      recv = r->recv = (void *)(uintptr_t)send;
      r->move_to = mydispl;
      r->on_stage = stage_rs_inplace;
    }
    MPI_Datatype mdt = ts__mpi_dtype(dt);
    MPI_Op mop = mpi_op(op);
    int mrc;
    if (counts)
      for (int i = 0; i < p; i++) r->iarr[i] = (int)counts[i];
    if ((rc = begin(r))) {
      ts__req_release(r);
      return rc;
    }
    if (!counts) {
      mrc = r->native ? MPI_Reduce_scatter_block(sb, recv, (int)block, mdt, mop, c->mc)
                      : MPI_Ireduce_scatter_block(sb, recv, (int)block, mdt, mop, c->mc, &r->mr);
      return issued(r, mrc, r->native ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block", out);
    }
    mrc = r->native ? MPI_Reduce_scatter(sb, recv, r->iarr, mdt, mop, c->mc)
                    : MPI_Ireduce_scatter(sb, recv, r->iarr, mdt, mop, c->mc, &r->mr);
    return issued(r, mrc, r->native ? "MPI_Reduce_scatter" : "MPI_Ireduce_scatter", out);
  }
  int *sc = r->iarr, *sd = sc + p, *rcn = sd + p, *rd = rcn + p;
  size_t off = 0;
  for (int i = 0; i < p; i++) {
    sc[i] = (int)(counts ? counts[i] : block);
    sd[i] = (int)off;
    off += (size_t)sc[i];
    rcn[i] = (int)mine;
    rd[i] = (int)((size_t)i * mine);
  }
  if (mine * (size_t)p > (size_t)INT_MAX) {
    ts__req_release(r);
    return check_count(c, &s, mine * (size_t)p, "staging size");
  }
  r->tmp = malloc(mine * (size_t)p * 2 + 2);
  if (!r->tmp) {
    ts__req_release(r);
    return oom(c, &s);
  }
  r->on_stage = stage_rs16;
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  int mrc = r->native ? MPI_Alltoallv(send, sc, sd, MPI_UINT16_T, r->tmp, rcn, rd, MPI_UINT16_T, c->mc)
                      : MPI_Ialltoallv(send, sc, sd, MPI_UINT16_T, r->tmp, rcn, rd, MPI_UINT16_T, c->mc, &r->mr);
  return issued(r, mrc, r->native ? "MPI_Alltoallv" : "MPI_Ialltoallv", out);
}

/* counts == NULL: equal blocks of `block` (allgather). */
static int issue_allgather(ts_comm *c, const void *send, void *recv, const size_t *counts,
                           const size_t *displs, size_t block, ts_dtype dt, int blocking, ts_comm_req **out) {
  int kind = counts ? TS_COLL_ALLGATHERV : TS_COLL_ALLGATHER;
  int p = c ? c->size : 0, me = c ? c->rank : 0;
  size_t total = 0, extent = 0;
  if (c) {
    for (int i = 0; i < p; i++) {
      size_t n = counts ? counts[i] : block;
      size_t d = counts ? (displs ? displs[i] : total) : (size_t)i * block;
      total += n;
      if (n && d + n > extent) extent = d + n;
    }
  }
  ts_coll_sig s = mksig(c, kind, -1, dt, (int64_t)(counts ? total : block), -1);
  int rc = check_args(c, &s, dt, 0, TS_REDUCE_SUM);
  if (rc) return rc;
  size_t mine = counts ? counts[me] : block;
  if ((rc = check_count(c, &s, total, "total count")) || (rc = check_count(c, &s, extent, "recv extent")))
    return rc;
  if ((rc = check_buf(c, &s, send, mine, "send")) || (rc = check_buf(c, &s, recv, extent, "recv")))
    return rc;
  size_t esz = ts_dtype_size(dt);
  size_t mydispl = counts ? 0 : (size_t)me * block;
  if (counts) {
    if (displs) {
      mydispl = displs[me];
    } else {
      for (int i = 0; i < me; i++) mydispl += counts[i];
    }
  }
  int inplace = mine > 0 && recv && send == (const char *)recv + mydispl * esz;
  if (!inplace && overlap(send, mine * esz, recv, extent * esz))
    return ts__arg_fail(c, TS_EINVAL, &s,
                        "send and recv overlap (in place needs send == this rank's block of recv)");
  ts_comm_req *r = new_req(c, &s, counts ? 2 * p : 0, blocking);
  if (!r) return oom(c, &s);
  r->send = send;
  r->recv = recv;
  r->dtype = dt;
  size_t off = 0;
  for (int i = 0; counts && i < p; i++) {
    r->iarr[i] = (int)counts[i];
    r->iarr[p + i] = (int)(displs ? displs[i] : off);
    off += counts[i];
  }
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  MPI_Datatype mdt = ts__mpi_dtype(dt);
  const void *sb = inplace ? MPI_IN_PLACE : send;
  int mrc;
  if (!counts) {
    mrc = r->native ? MPI_Allgather(sb, (int)block, mdt, recv, (int)block, mdt, c->mc)
                    : MPI_Iallgather(sb, (int)block, mdt, recv, (int)block, mdt, c->mc, &r->mr);
    return issued(r, mrc, r->native ? "MPI_Allgather" : "MPI_Iallgather", out);
  }
  mrc = r->native ? MPI_Allgatherv(sb, (int)mine, mdt, recv, r->iarr, r->iarr + p, mdt, c->mc)
                  : MPI_Iallgatherv(sb, (int)mine, mdt, recv, r->iarr, r->iarr + p, mdt, c->mc, &r->mr);
  return issued(r, mrc, r->native ? "MPI_Allgatherv" : "MPI_Iallgatherv", out);
}

static int issue_broadcast(ts_comm *c, void *buf, size_t count, ts_dtype dt, int root, int blocking,
                           ts_comm_req **out) {
  ts_coll_sig s = mksig(c, TS_COLL_BROADCAST, -1, dt, (int64_t)count, root);
  int rc = check_args(c, &s, dt, 0, TS_REDUCE_SUM);
  if (!rc) rc = check_count(c, &s, count, "count");
  if (!rc) rc = check_buf(c, &s, buf, count, "data");
  if (rc) return rc;
  if (root < 0 || root >= c->size) return ts__arg_fail(c, TS_EINVAL, &s, "root is not a rank of the communicator");
  ts_comm_req *r = new_req(c, &s, 0, blocking);
  if (!r) return oom(c, &s);
  r->recv = buf;
  r->dtype = dt;
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  MPI_Datatype mdt = ts__mpi_dtype(dt);
  int mrc = r->native ? MPI_Bcast(buf, (int)count, mdt, root, c->mc)
                      : MPI_Ibcast(buf, (int)count, mdt, root, c->mc, &r->mr);
  return issued(r, mrc, r->native ? "MPI_Bcast" : "MPI_Ibcast", out);
}

/* ---- blocking forms ---- */
static int finish(int rc, ts_comm_req *r) { return rc ? rc : ts__req_finish_blocking(r); }

int ts_comm_allreduce(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                      ts_reduce_op op) {
  ts_comm_req *r = NULL;
  int rc_ = issue_allreduce(c, send, recv, count, dtype, op, 1, &r);
  return finish(rc_, r);
}

int ts_comm_allgather(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype) {
  ts_comm_req *r = NULL;
  int rc_ = issue_allgather(c, send, recv, NULL, NULL, count, dtype, 1, &r);
  return finish(rc_, r);
}

int ts_comm_allgatherv(ts_comm *c, const void *send, void *recv, const size_t *counts,
                       const size_t *displs, ts_dtype dtype) {
  if (!counts) return ts_error_set(TS_EINVAL, "allgatherv: counts is NULL");
  ts_comm_req *r = NULL;
  int rc_ = issue_allgather(c, send, recv, counts, displs, 0, dtype, 1, &r);
  return finish(rc_, r);
}

int ts_comm_reduce_scatter(ts_comm *c, const void *send, void *recv, const size_t *counts,
                           ts_dtype dtype, ts_reduce_op op) {
  if (!counts) return ts_error_set(TS_EINVAL, "reduce_scatter: counts is NULL");
  ts_comm_req *r = NULL;
  int rc_ = issue_reduce_scatter(c, send, recv, counts, 0, dtype, op, 1, &r);
  return finish(rc_, r);
}

int ts_comm_reduce_scatter_block(ts_comm *c, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op) {
  ts_comm_req *r = NULL;
  int rc_ = issue_reduce_scatter(c, send, recv, NULL, count, dtype, op, 1, &r);
  return finish(rc_, r);
}

int ts_comm_broadcast(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int root) {
  ts_comm_req *r = NULL;
  int rc_ = issue_broadcast(c, buf, count, dtype, root, 1, &r);
  return finish(rc_, r);
}

int ts_comm_alltoall(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype) {
  ts_coll_sig s = mksig(c, TS_COLL_ALLTOALL, -1, dtype, (int64_t)count, -1);
  int rc = check_args(c, &s, dtype, 0, TS_REDUCE_SUM);
  if (rc) return rc;
  size_t total = count * (size_t)c->size, esz = ts_dtype_size(dtype);
  if ((rc = check_count(c, &s, total, "total count"))) return rc;
  if ((rc = check_buf(c, &s, send, total, "send")) || (rc = check_buf(c, &s, recv, total, "recv")))
    return rc;
  if (overlap(send, total * esz, recv, total * esz))
    return ts__arg_fail(c, TS_EINVAL, &s, "send and recv overlap");
  ts_comm_req *r = new_req(c, &s, 0, 1);
  if (!r) return oom(c, &s);
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  MPI_Datatype mdt = ts__mpi_dtype(dtype);
  int mrc = r->native ? MPI_Alltoall(send, (int)count, mdt, recv, (int)count, mdt, c->mc)
                      : MPI_Ialltoall(send, (int)count, mdt, recv, (int)count, mdt, c->mc, &r->mr);
  rc = issued(r, mrc, r->native ? "MPI_Alltoall" : "MPI_Ialltoall", &r);
  return finish(rc, r);
}

int ts_comm_alltoallv(ts_comm *c, const void *send, const size_t *sendcounts,
                      const size_t *sdispls, void *recv, const size_t *recvcounts,
                      const size_t *rdispls, ts_dtype dtype) {
  ts_coll_sig s = mksig(c, TS_COLL_ALLTOALLV, -1, dtype, -1, -1);
  int rc = check_args(c, &s, dtype, 0, TS_REDUCE_SUM);
  if (rc) return rc;
  if (!sendcounts || !recvcounts) return ts__arg_fail(c, TS_EINVAL, &s, "counts are NULL");
  int p = c->size;
  size_t sext = 0, rext = 0, soff = 0, roff = 0, stot = 0;
  for (int i = 0; i < p; i++) {
    size_t sd = sdispls ? sdispls[i] : soff, rd = rdispls ? rdispls[i] : roff;
    if (sendcounts[i] && sd + sendcounts[i] > sext) sext = sd + sendcounts[i];
    if (recvcounts[i] && rd + recvcounts[i] > rext) rext = rd + recvcounts[i];
    soff += sendcounts[i];
    roff += recvcounts[i];
    stot += sendcounts[i];
  }
  s.shown = (int64_t)stot;
  if ((rc = check_count(c, &s, sext, "send extent")) || (rc = check_count(c, &s, rext, "recv extent")))
    return rc;
  if ((rc = check_buf(c, &s, send, sext, "send")) || (rc = check_buf(c, &s, recv, rext, "recv")))
    return rc;
  size_t esz = ts_dtype_size(dtype);
  if (overlap(send, sext * esz, recv, rext * esz))
    return ts__arg_fail(c, TS_EINVAL, &s, "send and recv overlap");
  ts_comm_req *r = new_req(c, &s, 4 * p, 1);
  if (!r) return oom(c, &s);
  int *sc = r->iarr, *sd = sc + p, *rcn = sd + p, *rd = rcn + p;
  soff = roff = 0;
  for (int i = 0; i < p; i++) {
    sc[i] = (int)sendcounts[i];
    sd[i] = (int)(sdispls ? sdispls[i] : soff);
    rcn[i] = (int)recvcounts[i];
    rd[i] = (int)(rdispls ? rdispls[i] : roff);
    soff += sendcounts[i];
    roff += recvcounts[i];
  }
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  MPI_Datatype mdt = ts__mpi_dtype(dtype);
  int mrc = r->native ? MPI_Alltoallv(send, sc, sd, mdt, recv, rcn, rd, mdt, c->mc)
                      : MPI_Ialltoallv(send, sc, sd, mdt, recv, rcn, rd, mdt, c->mc, &r->mr);
  rc = issued(r, mrc, r->native ? "MPI_Alltoallv" : "MPI_Ialltoallv", &r);
  return finish(rc, r);
}

int ts_comm_barrier(ts_comm *c) {
  ts_coll_sig s = mksig(c, TS_COLL_BARRIER, -1, TS_F32, 0, -1);
  s.dtype = -1;
  int rc = ts__comm_usable(c, &s);
  if (rc) return rc;
  ts_comm_req *r = new_req(c, &s, 0, 1);
  if (!r) return oom(c, &s);
  if ((rc = begin(r))) {
    ts__req_release(r);
    return rc;
  }
  int mrc = r->native ? MPI_Barrier(c->mc) : MPI_Ibarrier(c->mc, &r->mr);
  rc = issued(r, mrc, r->native ? "MPI_Barrier" : "MPI_Ibarrier", &r);
  return finish(rc, r);
}

/* ---- point to point ---- */
static int stage_recv(ts_comm_req *r) {
  int got = 0;
  MPI_Get_count(&r->st, ts__mpi_dtype(r->dtype), &got);
  r->done = 1;
  if ((size_t)got != r->n_local) {
    char m[128];
    snprintf(m, sizeof m, "received %d elements, expected %zu", got, r->n_local);
    return ts__arg_fail(r->c, TS_ECOMM, &r->sig, m);
  }
  return TS_OK;
}

static int pt2pt(ts_comm *c, int kind, void *buf, size_t count, ts_dtype dt, int peer, int tag,
                 ts_comm_req **out) {
  ts_coll_sig s = mksig(c, kind, -1, dt, (int64_t)count, peer);
  int rc = check_args(c, &s, dt, 0, TS_REDUCE_SUM);
  if (!rc) rc = check_count(c, &s, count, "count");
  if (!rc) rc = check_buf(c, &s, buf, count, "data");
  if (rc) return rc;
  if (peer < 0 || peer >= c->size) return ts__arg_fail(c, TS_EINVAL, &s, "peer is not a rank of the communicator");
  int ub = ts__watch_tag() - 1; /* the highest tag is the watchdog's */
  if (tag < 0 || tag > ub) {
    char m[64];
    snprintf(m, sizeof m, "tag %d outside 0..%d", tag, ub);
    return ts__arg_fail(c, TS_EINVAL, &s, m);
  }
  ts_comm_req *r = new_req(c, &s, 0, 0); /* always polled: a receive's timeout is cancelled */
  if (!r) return oom(c, &s);
  r->dtype = dt;
  r->recv = buf;
  r->n_local = count;
  c->last = s;
  MPI_Datatype mdt = ts__mpi_dtype(dt);
  if (kind == TS_COLL_SEND)
    return issued(r, MPI_Isend(buf, (int)count, mdt, peer, tag, c->mc, &r->mr), "MPI_Isend", out);
  r->on_stage = stage_recv;
  return issued(r, MPI_Irecv(buf, (int)count, mdt, peer, tag, c->mc, &r->mr), "MPI_Irecv", out);
}

int ts_comm_send(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag) {
  ts_comm_req *r = NULL;
  int rc_ = pt2pt(c, TS_COLL_SEND, (void *)buf, count, dtype, dest, tag, &r);
  return finish(rc_, r);
}

int ts_comm_recv(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int src, int tag) {
  ts_comm_req *r = NULL;
  int rc_ = pt2pt(c, TS_COLL_RECV, buf, count, dtype, src, tag, &r);
  return finish(rc_, r);
}

/* ---- buffered sends ---- */
static void bs_drop(ts_comm *c, int k) {
  ts_comm_req_free(c->bs_req[k]);
  free(c->bs_buf[k]);
  c->bs_n--;
  c->bs_req[k] = c->bs_req[c->bs_n];
  c->bs_buf[k] = c->bs_buf[c->bs_n];
  c->bs_bytes[k] = c->bs_bytes[c->bs_n];
}

/* Frees the sends that completed; the first failure is returned. */
static int bs_reap(ts_comm *c) {
  for (int k = 0; k < c->bs_n;) {
    int done = 0, rc = ts_comm_test(c->bs_req[k], &done);
    if (rc) return rc;
    if (done) bs_drop(c, k);
    else k++;
  }
  return TS_OK;
}

int ts_comm_send_copy(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag) {
  if (!c) return ts_error_set(TS_EINVAL, "send: no communicator");
  int rc = bs_reap(c);
  if (rc) return rc;
  if (c->bs_n == c->bs_cap) {
    int cap = c->bs_cap ? 2 * c->bs_cap : 8;
    ts_comm_req **r = realloc(c->bs_req, sizeof *r * (size_t)cap);
    if (r) c->bs_req = r;
    void **b = realloc(c->bs_buf, sizeof *b * (size_t)cap);
    if (b) c->bs_buf = b;
    size_t *n = realloc(c->bs_bytes, sizeof *n * (size_t)cap);
    if (n) c->bs_bytes = n;
    if (!r || !b || !n) return ts_error_set(TS_ENOMEM, "send: out of memory for the pending-send list");
    c->bs_cap = cap;
  }
  size_t bytes = count * ts_dtype_size(dtype);
  void *copy = malloc(bytes ? bytes : 1);
  if (!copy) return ts_error_set(TS_ENOMEM, "send: out of memory for a %zu-byte copy to rank %d", bytes, dest);
  if (bytes) memcpy(copy, buf, bytes);
  ts_comm_req *r = NULL;
  if ((rc = pt2pt(c, TS_COLL_SEND, copy, count, dtype, dest, tag, &r))) {
    free(copy);
    return rc;
  }
  c->bs_req[c->bs_n] = r;
  c->bs_buf[c->bs_n] = copy;
  c->bs_bytes[c->bs_n++] = bytes;
  return TS_OK;
}

int ts_comm_flush_sends(ts_comm *c) {
  if (!c) return TS_OK;
  while (c->bs_n > 0) {
    int rc = ts_comm_wait(c->bs_req[c->bs_n - 1]);
    if (rc) return rc;
    bs_drop(c, c->bs_n - 1);
  }
  return TS_OK;
}

int ts_comm_pending_sends(const ts_comm *c, size_t *bytes) {
  size_t b = 0;
  for (int k = 0; c && k < c->bs_n; k++) b += c->bs_bytes[k];
  if (bytes) *bytes = b;
  return c ? c->bs_n : 0;
}

/* ---- non-blocking forms ---- */
static int need_req(ts_comm_req **req, const char *fn) {
  if (!req) return ts_error_set(TS_EINVAL, "%s: req is NULL", fn);
  *req = NULL;
  return TS_OK;
}

int ts_comm_iallreduce(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                       ts_reduce_op op, ts_comm_req **req) {
  int rc = need_req(req, "iallreduce");
  return rc ? rc : issue_allreduce(c, send, recv, count, dtype, op, 0, req);
}

int ts_comm_iallgather(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                       ts_comm_req **req) {
  int rc = need_req(req, "iallgather");
  return rc ? rc : issue_allgather(c, send, recv, NULL, NULL, count, dtype, 0, req);
}

int ts_comm_iallgatherv(ts_comm *c, const void *send, void *recv, const size_t *counts,
                        const size_t *displs, ts_dtype dtype, ts_comm_req **req) {
  int rc = need_req(req, "iallgatherv");
  if (!rc && !counts) rc = ts_error_set(TS_EINVAL, "iallgatherv: counts is NULL");
  return rc ? rc : issue_allgather(c, send, recv, counts, displs, 0, dtype, 0, req);
}

int ts_comm_ireduce_scatter(ts_comm *c, const void *send, void *recv, const size_t *counts,
                            ts_dtype dtype, ts_reduce_op op, ts_comm_req **req) {
  int rc = need_req(req, "ireduce_scatter");
  if (!rc && !counts) rc = ts_error_set(TS_EINVAL, "ireduce_scatter: counts is NULL");
  return rc ? rc : issue_reduce_scatter(c, send, recv, counts, 0, dtype, op, 0, req);
}

int ts_comm_ireduce_scatter_block(ts_comm *c, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_reduce_op op, ts_comm_req **req) {
  int rc = need_req(req, "ireduce_scatter_block");
  return rc ? rc : issue_reduce_scatter(c, send, recv, NULL, count, dtype, op, 0, req);
}

int ts_comm_ibroadcast(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int root,
                       ts_comm_req **req) {
  int rc = need_req(req, "ibroadcast");
  return rc ? rc : issue_broadcast(c, buf, count, dtype, root, 0, req);
}

int ts_comm_isend(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag,
                  ts_comm_req **req) {
  int rc = need_req(req, "isend");
  return rc ? rc : pt2pt(c, TS_COLL_SEND, (void *)buf, count, dtype, dest, tag, req);
}

int ts_comm_irecv(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int src, int tag,
                  ts_comm_req **req) {
  int rc = need_req(req, "irecv");
  return rc ? rc : pt2pt(c, TS_COLL_RECV, buf, count, dtype, src, tag, req);
}
