/* Collectives over MPI against serial references. Runs as a plain process (1 rank, MPI
 * singleton) and under mpirun -n 2, 3, 4 (ctest: test_comm, test_comm_np2..np4).
 *
 * Every rank knows every rank's input (val(source, i), small integers), so each rank computes
 * the expected result locally; the inputs are exact in every dtype and their sums too, so the
 * comparisons are exact (MEAN: one division, rounded once, the same in the reference). */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/comm.h"
#include "test_util.h"

static int R, P;
static ts_comm *W;

static const ts_dtype k_red[] = {TS_F32, TS_BF16, TS_F16, TS_I32, TS_I64};
static const ts_dtype k_all[] = {TS_F32, TS_BF16, TS_F16, TS_I32, TS_I64, TS_U8};
#define NRED (int)(sizeof k_red / sizeof k_red[0])
#define NALL (int)(sizeof k_all / sizeof k_all[0])
static const size_t k_sizes[] = {0, 1, 7, 1000, 4099};
#define NSIZES (int)(sizeof k_sizes / sizeof k_sizes[0])

/* Input element i of source s: an integer in [-16, 16] (u8: shifted to [0, 32]). */
static int val(int s, size_t i) { return (int)(((size_t)s * 31 + i * 7 + (i / 5) * 3) % 33) - 16; }

static void put(ts_dtype dt, void *b, size_t i, double v) {
  switch (dt) {
    case TS_F32: ((float *)b)[i] = (float)v; break;
    case TS_BF16: ((uint16_t *)b)[i] = ts_f32_to_bf16((float)v); break;
    case TS_F16: ((uint16_t *)b)[i] = ts_f32_to_f16((float)v); break;
    case TS_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    case TS_I64: ((int64_t *)b)[i] = (int64_t)v; break;
    case TS_U8: ((uint8_t *)b)[i] = (uint8_t)(v + 16); break;
    default: break;
  }
}

static double get(ts_dtype dt, const void *b, size_t i) {
  switch (dt) {
    case TS_F32: return ((const float *)b)[i];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)b)[i]);
    case TS_F16: return ts_f16_to_f32(((const uint16_t *)b)[i]);
    case TS_I32: return ((const int32_t *)b)[i];
    case TS_I64: return (double)((const int64_t *)b)[i];
    case TS_U8: return (double)((const uint8_t *)b)[i] - 16;
    default: return 0;
  }
}

/* v stored in dt and read back (the rounding of the result). */
static double rt(ts_dtype dt, double v) {
  unsigned char b[8];
  put(dt, b, 0, v);
  return get(dt, b, 0);
}

/* Reference reduction of the n contributions x[0..n-1], rounded to dt. */
static double ref_reduce(ts_dtype dt, ts_reduce_op op, const int *x, int n) {
  double s = 0, mx = x[0], mn = x[0];
  for (int r = 0; r < n; r++) {
    s += x[r];
    if (x[r] > mx) mx = x[r];
    if (x[r] < mn) mn = x[r];
  }
  switch (op) {
    case TS_REDUCE_SUM: return rt(dt, s);
    case TS_REDUCE_MAX: return rt(dt, mx);
    case TS_REDUCE_MIN: return rt(dt, mn);
    case TS_REDUCE_MEAN:
      if (ts_dtype_is_float(dt)) return rt(dt, (double)((float)s / (float)n));
      return rt(dt, (double)((int64_t)s / n));
    default: return 0;
  }
}

static void *xalloc(size_t n, ts_dtype dt) {
  void *p = calloc(n ? n : 1, ts_dtype_size(dt) ? ts_dtype_size(dt) : 1);
  if (!p) abort();
  return p;
}

/* Compares got[0..n) with want(i); reports the first difference. */
#define EXPECT_ELEMS(what, dt, got, n, want_expr)                                                  \
  do {                                                                                             \
    size_t bad_ = (size_t)-1;                                                                      \
    double w_ = 0, g_ = 0;                                                                         \
    for (size_t i = 0; i < (n); i++) {                                                             \
      double want_ = (want_expr), got_ = get((dt), (got), i);                                      \
      if (want_ != got_) {                                                                         \
        bad_ = i, w_ = want_, g_ = got_;                                                           \
        break;                                                                                     \
      }                                                                                            \
    }                                                                                              \
    CHECK_MSG(bad_ == (size_t)-1, "rank %d: %s %s: [%zu] = %g, expected %g", R, (what),           \
              ts_dtype_name(dt), bad_, g_, w_);                                                    \
  } while (0)

static int contrib[64];

static double ref_elem(ts_dtype dt, ts_reduce_op op, size_t i, int n, int (*src)(int r, size_t i)) {
  for (int r = 0; r < n; r++) contrib[r] = src(r, i);
  return ref_reduce(dt, op, contrib, n);
}

static int src_rank(int r, size_t i) { return val(r, i); }

/* ---- allreduce (blocking, in place, non-blocking) ---- */
static void test_allreduce(const size_t *sizes, int nsizes) {
  for (int d = 0; d < NRED; d++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++)
      for (int k = 0; k < nsizes; k++) {
        ts_dtype dt = k_red[d];
        size_t n = sizes[k];
        void *s = xalloc(n, dt), *o = xalloc(n, dt), *io = xalloc(n, dt);
        for (size_t i = 0; i < n; i++) put(dt, s, i, val(R, i));
        memcpy(io, s, n * ts_dtype_size(dt));
        CHECK_OK(ts_comm_allreduce(W, s, o, n, dt, (ts_reduce_op)op));
        char what[64];
        snprintf(what, sizeof what, "allreduce(%s) n=%zu", ts_reduce_op_name((ts_reduce_op)op), n);
        EXPECT_ELEMS(what, dt, o, n, ref_elem(dt, (ts_reduce_op)op, i, P, src_rank));
        EXPECT_ELEMS("allreduce send untouched", dt, s, n, rt(dt, val(R, i)));
        CHECK_OK(ts_comm_allreduce(W, io, io, n, dt, (ts_reduce_op)op));
        EXPECT_ELEMS("allreduce in place", dt, io, n, ref_elem(dt, (ts_reduce_op)op, i, P, src_rank));
        free(s);
        free(o);
        free(io);
      }
}

/* ---- bf16/f16 reductions on every bit pattern (fractions, subnormals, inf, NaN): the f32
 * reduction in rank order rounded once with tensor.h's conversions, bit for bit (NaN payloads
 * aside) ---- */
static uint16_t pattern(int r, size_t i) { return (uint16_t)(i * 40503u + (size_t)r * 7919u); }

static void test_rounding16(void) {
  const size_t n = 65536;
  uint16_t *s = xalloc(n, TS_BF16), *o = xalloc(n, TS_BF16);
  for (int d = 0; d < 2; d++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++) {
      ts_dtype dt = d ? TS_F16 : TS_BF16;
      float (*tof)(uint16_t) = d ? ts_f16_to_f32 : ts_bf16_to_f32;
      uint16_t (*toh)(float) = d ? ts_f32_to_f16 : ts_f32_to_bf16;
      for (size_t i = 0; i < n; i++) s[i] = pattern(R, i);
      CHECK_OK(ts_comm_allreduce(W, s, o, n, dt, (ts_reduce_op)op));
      size_t bad = 0, first = 0;
      uint16_t want1 = 0;
      for (size_t i = 0; i < n; i++) {
        float acc = tof(pattern(0, i));
        for (int r = 1; r < P; r++) {
          float v = tof(pattern(r, i));
          if (op == TS_REDUCE_SUM || op == TS_REDUCE_MEAN) acc = acc + v;
          else if (op == TS_REDUCE_MAX) acc = (isnan(v) || v > acc) ? v : acc;
          else acc = (isnan(v) || v < acc) ? v : acc;
        }
        if (op == TS_REDUCE_MEAN) acc = acc / (float)P;
        uint16_t want = toh(acc);
        int same = want == o[i] || (isnan(tof(want)) && isnan(tof(o[i])));
        if (!same && bad++ == 0) first = i, want1 = want;
      }
      CHECK_MSG(bad == 0, "rank %d: %s allreduce(%s) of bit patterns: %zu wrong, first [%zu] = 0x%04x, "
                "expected 0x%04x", R, ts_dtype_name(dt), ts_reduce_op_name((ts_reduce_op)op), bad, first,
                o[first], want1);
    }
  free(s);
  free(o);
}

/* ---- allgather / allgatherv ---- */
static void test_allgather(const size_t *sizes, int nsizes) {
  for (int d = 0; d < NALL; d++)
    for (int k = 0; k < nsizes; k++) {
      ts_dtype dt = k_all[d];
      size_t n = sizes[k], esz = ts_dtype_size(dt);
      void *s = xalloc(n, dt), *o = xalloc(n * P, dt);
      for (size_t i = 0; i < n; i++) put(dt, s, i, val(R, i));
      CHECK_OK(ts_comm_allgather(W, s, o, n, dt));
      EXPECT_ELEMS("allgather", dt, o, n * P, rt(dt, val((int)(i / (n ? n : 1)), i % (n ? n : 1))));
      /* in place: this rank's block already in recv */
      memset(o, 0, n * P * esz);
      memcpy((char *)o + (size_t)R * n * esz, s, n * esz);
      CHECK_OK(ts_comm_allgather(W, (char *)o + (size_t)R * n * esz, o, n, dt));
      EXPECT_ELEMS("allgather in place", dt, o, n * P, rt(dt, val((int)(i / (n ? n : 1)), i % (n ? n : 1))));
      free(s);
      free(o);

      /* uneven, with a zero count (rank 1), packed and with gaps (sentinel 5 must survive) */
      size_t counts[64], displs[64], tot = 0, ext = 0;
      for (int r = 0; r < P; r++) {
        counts[r] = r == 1 ? 0 : (n + (size_t)r) / (size_t)(r + 1);
        displs[r] = tot + (size_t)r; /* gap of r before block r */
        tot += counts[r];
      }
      ext = tot + (size_t)P;
      s = xalloc(counts[R], dt);
      o = xalloc(ext, dt);
      for (size_t i = 0; i < counts[R]; i++) put(dt, s, i, val(R, i));
      CHECK_OK(ts_comm_allgatherv(W, s, o, counts, NULL, dt));
      size_t off = 0;
      for (int r = 0; r < P; r++) {
        EXPECT_ELEMS("allgatherv", dt, (char *)o + off * esz, counts[r], rt(dt, val(r, i)));
        off += counts[r];
      }
      for (size_t i = 0; i < ext; i++) put(dt, o, i, 5);
      CHECK_OK(ts_comm_allgatherv(W, s, o, counts, displs, dt));
      for (int r = 0; r < P; r++) {
        EXPECT_ELEMS("allgatherv displs", dt, (char *)o + displs[r] * esz, counts[r], rt(dt, val(r, i)));
        if (r > 0) CHECK(get(dt, o, displs[r] - 1) == 5); /* the gap */
      }
      /* in place */
      for (size_t i = 0; i < ext; i++) put(dt, o, i, 5);
      memcpy((char *)o + displs[R] * esz, s, counts[R] * esz);
      if (counts[R] > 0) {
        CHECK_OK(ts_comm_allgatherv(W, (char *)o + displs[R] * esz, o, counts, displs, dt));
      } else {
        CHECK_OK(ts_comm_allgatherv(W, NULL, o, counts, displs, dt));
      }
      for (int r = 0; r < P; r++)
        EXPECT_ELEMS("allgatherv in place", dt, (char *)o + displs[r] * esz, counts[r], rt(dt, val(r, i)));
      free(s);
      free(o);
    }
}

/* ---- reduce_scatter (uneven counts) and reduce_scatter_block ---- */
static size_t g_off; /* offset of the block being checked */
static int src_rank_off(int r, size_t i) { return val(r, g_off + i); }

static void test_reduce_scatter(const size_t *sizes, int nsizes) {
  for (int d = 0; d < NRED; d++)
    for (int op = 0; op < TS_REDUCE_COUNT; op++)
      for (int k = 0; k < nsizes; k++) {
        ts_dtype dt = k_red[d];
        size_t n = sizes[k];
        for (int variant = 0; variant < 2; variant++) {
          size_t counts[64], off = 0;
          if (variant == 0) ts_comm_block_counts(n, P, counts); /* uneven over 3 ranks */
          else for (int r = 0; r < P; r++) counts[r] = r == P - 1 ? n : 0; /* all to the last */
          for (int r = 0; r < R; r++) off += counts[r];
          void *s = xalloc(n, dt), *o = xalloc(counts[R], dt);
          for (size_t i = 0; i < n; i++) put(dt, s, i, val(R, i));
          CHECK_OK(ts_comm_reduce_scatter(W, s, o, counts, dt, (ts_reduce_op)op));
          g_off = off;
          char what[64];
          snprintf(what, sizeof what, "reduce_scatter(%s) n=%zu v%d", ts_reduce_op_name((ts_reduce_op)op), n, variant);
          EXPECT_ELEMS(what, dt, o, counts[R], ref_elem(dt, (ts_reduce_op)op, i, P, src_rank_off));
          free(s);
          free(o);
          /* in place: the rank's block reduced at its own place in the buffer (blocking, then
           * non-blocking) */
          for (int nb = 0; nb < 2; nb++) {
            void *b = xalloc(n, dt);
            for (size_t i = 0; i < n; i++) put(dt, b, i, val(R, i));
            void *mine = (char *)b + off * ts_dtype_size(dt);
            if (nb) {
              ts_comm_req *q = NULL;
              CHECK_OK(ts_comm_ireduce_scatter(W, b, mine, counts, dt, (ts_reduce_op)op, &q));
              CHECK_OK(ts_comm_wait(q));
              ts_comm_req_free(q);
            } else {
              CHECK_OK(ts_comm_reduce_scatter(W, b, mine, counts, dt, (ts_reduce_op)op));
            }
            snprintf(what, sizeof what, "%sreduce_scatter(%s) in place n=%zu v%d", nb ? "i" : "",
                     ts_reduce_op_name((ts_reduce_op)op), n, variant);
            EXPECT_ELEMS(what, dt, mine, counts[R], ref_elem(dt, (ts_reduce_op)op, i, P, src_rank_off));
            free(b);
          }
        }
        if (n > 1000) continue;
        /* equal blocks of n */
        void *s = xalloc(n * P, dt), *o = xalloc(n, dt);
        for (size_t i = 0; i < n * P; i++) put(dt, s, i, val(R, i));
        CHECK_OK(ts_comm_reduce_scatter_block(W, s, o, n, dt, (ts_reduce_op)op));
        g_off = (size_t)R * n;
        EXPECT_ELEMS("reduce_scatter_block", dt, o, n, ref_elem(dt, (ts_reduce_op)op, i, P, src_rank_off));
        free(s);
        free(o);
      }
}

/* ---- broadcast ---- */
static void test_broadcast(const size_t *sizes, int nsizes) {
  for (int d = 0; d < NALL; d++)
    for (int k = 0; k < nsizes; k++)
      for (int root = 0; root < P; root += (P > 1 ? P - 1 : 1)) {
        ts_dtype dt = k_all[d];
        size_t n = sizes[k];
        void *b = xalloc(n, dt);
        for (size_t i = 0; i < n; i++) put(dt, b, i, R == root ? val(root, i) : 3);
        CHECK_OK(ts_comm_broadcast(W, b, n, dt, root));
        EXPECT_ELEMS("broadcast", dt, b, n, rt(dt, val(root, i)));
        free(b);
      }
}

/* ---- alltoall / alltoallv ---- */
static void test_alltoall(const size_t *sizes, int nsizes) {
  for (int d = 0; d < NALL; d++)
    for (int k = 0; k < nsizes; k++) {
      ts_dtype dt = k_all[d];
      size_t n = sizes[k], esz = ts_dtype_size(dt);
      if (n > 1000) continue;
      void *s = xalloc(n * P, dt), *o = xalloc(n * P, dt);
      for (int j = 0; j < P; j++)
        for (size_t i = 0; i < n; i++) put(dt, s, (size_t)j * n + i, val(R * P + j, i));
      CHECK_OK(ts_comm_alltoall(W, s, o, n, dt));
      for (int j = 0; j < P; j++)
        EXPECT_ELEMS("alltoall", dt, (char *)o + (size_t)j * n * esz, n, rt(dt, val(j * P + R, i)));
      free(s);
      free(o);

      /* uneven: rank a sends ((a + 2b) % 4) * m elements to rank b; recv with gaps */
      size_t m = n / 4 + 1, sc[64], rc[64], rd[64], stot = 0, rtot = 0;
      for (int j = 0; j < P; j++) {
        sc[j] = (size_t)((R + 2 * j) % 4) * m;
        rc[j] = (size_t)((j + 2 * R) % 4) * m;
        rd[j] = rtot + 1;
        stot += sc[j];
        rtot += rc[j] + 1;
      }
      s = xalloc(stot, dt);
      o = xalloc(rtot, dt);
      size_t off = 0;
      for (int j = 0; j < P; j++)
        for (size_t i = 0; i < sc[j]; i++) put(dt, s, off++, val(R * P + j, i));
      CHECK_OK(ts_comm_alltoallv(W, s, sc, NULL, o, rc, rd, dt));
      for (int j = 0; j < P; j++)
        EXPECT_ELEMS("alltoallv", dt, (char *)o + rd[j] * esz, rc[j], rt(dt, val(j * P + R, i)));
      free(s);
      free(o);
    }
}

/* ---- send / recv ---- */
static void test_p2p(void) {
  /* ring with non-blocking receive and send (works for one rank: to itself) */
  for (int k = 0; k < NSIZES; k++) {
    size_t n = k_sizes[k];
    float *s = xalloc(n, TS_F32), *o = xalloc(n, TS_F32);
    int to = (R + 1) % P, from = (R + P - 1) % P;
    for (size_t i = 0; i < n; i++) s[i] = (float)val(R, i);
    ts_comm_req *rq = NULL, *sq = NULL;
    CHECK_OK(ts_comm_irecv(W, o, n, TS_F32, from, 3, &rq));
    CHECK_OK(ts_comm_isend(W, s, n, TS_F32, to, 3, &sq));
    CHECK_OK(ts_comm_wait(sq));
    CHECK_OK(ts_comm_wait(rq));
    EXPECT_ELEMS("ring", TS_F32, o, n, (double)val(from, i));
    ts_comm_req_free(rq);
    ts_comm_req_free(sq);
    free(s);
    free(o);
  }
  if (P < 2 || R > 1) return;
  /* blocking pair 0 <-> 1 */
  int64_t a[7], b[7] = {0};
  for (int i = 0; i < 7; i++) a[i] = (int64_t)1 << (40 + i % 3);
  if (R == 0) {
    CHECK_OK(ts_comm_send(W, a, 7, TS_I64, 1, 11));
    CHECK_OK(ts_comm_recv(W, b, 7, TS_I64, 1, 12));
  } else {
    CHECK_OK(ts_comm_recv(W, b, 7, TS_I64, 0, 11));
    CHECK_OK(ts_comm_send(W, a, 7, TS_I64, 0, 12));
  }
  CHECK(memcmp(a, b, sizeof a) == 0);
  /* a short message is an error naming both counts */
  if (R == 0) {
    CHECK_OK(ts_comm_send(W, a, 5, TS_I64, 1, 13));
  } else {
    int rc = ts_comm_recv(W, b, 7, TS_I64, 0, 13);
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(), "received 5 elements, expected 7") != NULL, "%s", ts_last_error());
    CHECK(!ts_comm_failed(W));
  }
  /* a longer message than the receive buffer: an MPI error, the communicator stays usable */
  if (R == 0) {
    CHECK_OK(ts_comm_send(W, a, 7, TS_I64, 1, 14));
  } else {
    int rc = ts_comm_recv(W, b, 3, TS_I64, 0, 14);
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(), "recv (i64 x 3, from 0)") != NULL, "%s", ts_last_error());
    CHECK(!ts_comm_failed(W));
  }
}

/* ---- non-blocking collectives: several in flight, progressed by polling ---- */
static void test_nonblocking(void) {
  const size_t n1 = 4099, n2 = 1000, n3 = 7;
  float *a = xalloc(n1, TS_F32), *ao = xalloc(n1, TS_F32);
  uint16_t *b = xalloc(n2, TS_BF16);
  int32_t *g = xalloc(n3, TS_I32), *go = xalloc(n3 * P, TS_I32);
  uint16_t *hs = xalloc(n2, TS_F16), *ho = xalloc(n2, TS_F16);
  int64_t *bc = xalloc(n3, TS_I64);
  size_t counts[64], off = 0;
  ts_comm_block_counts(n2, P, counts);
  for (int r = 0; r < R; r++) off += counts[r];
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < n1; i++) a[i] = (float)val(R, i);
    for (size_t i = 0; i < n2; i++) b[i] = ts_f32_to_bf16((float)val(R, i));
    for (size_t i = 0; i < n3; i++) g[i] = val(R, i);
    for (size_t i = 0; i < n2; i++) hs[i] = ts_f32_to_f16((float)val(R, i));
    for (size_t i = 0; i < n3; i++) bc[i] = R == 0 ? val(0, i) : -99;
    ts_comm_req *q[5] = {0};
    CHECK_OK(ts_comm_iallreduce(W, a, ao, n1, TS_F32, TS_REDUCE_SUM, &q[0]));
    CHECK_OK(ts_comm_iallreduce(W, b, b, n2, TS_BF16, TS_REDUCE_MEAN, &q[1]));
    CHECK_OK(ts_comm_iallgather(W, g, go, n3, TS_I32, &q[2]));
    CHECK_OK(ts_comm_ireduce_scatter(W, hs, ho, counts, TS_F16, TS_REDUCE_MAX, &q[3]));
    CHECK_OK(ts_comm_ibroadcast(W, bc, n3, TS_I64, 0, &q[4]));
    int issued = 1;
    for (int k = 0; k < 5; k++) issued &= q[k] != NULL;
    if (!issued) break;
    if (round == 0) { /* poll, as the executor does between kernels */
      int left = 5, err = 0;
      int fin[5] = {0};
      double t0 = ts_time_now();
      while (left > 0 && !err && ts_time_now() - t0 < 60) {
        for (int k = 0; k < 5; k++) {
          if (fin[k]) continue;
          int done = 0;
          err |= ts_comm_test(q[k], &done);
          if (done) fin[k] = 1, left--;
        }
        sched_yield(); /* "a kernel" */
      }
      CHECK_MSG(left == 0 && !err, "rank %d: %d requests left, %s", R, left, err ? ts_last_error() : "");
    }
    CHECK_OK(ts_comm_wait_all(q, 5));
    for (int k = 0; k < 5; k++) {
      int done = 0;
      CHECK_OK(ts_comm_test(q[k], &done));
      CHECK(done == 1);
      ts_comm_req_free(q[k]);
    }
    EXPECT_ELEMS("iallreduce", TS_F32, ao, n1, ref_elem(TS_F32, TS_REDUCE_SUM, i, P, src_rank));
    EXPECT_ELEMS("iallreduce in place", TS_BF16, b, n2, ref_elem(TS_BF16, TS_REDUCE_MEAN, i, P, src_rank));
    EXPECT_ELEMS("iallgather", TS_I32, go, n3 * P, (double)val((int)(i / n3), i % n3));
    g_off = off;
    EXPECT_ELEMS("ireduce_scatter", TS_F16, ho, counts[R], ref_elem(TS_F16, TS_REDUCE_MAX, i, P, src_rank_off));
    EXPECT_ELEMS("ibroadcast", TS_I64, bc, n3, (double)val(0, i));
  }
  /* reduce_scatter_block, waited directly */
  float *rs = xalloc(n3 * P, TS_F32), *rso = xalloc(n3, TS_F32);
  for (size_t i = 0; i < n3 * P; i++) rs[i] = (float)val(R, i);
  ts_comm_req *q = NULL;
  CHECK_OK(ts_comm_ireduce_scatter_block(W, rs, rso, n3, TS_F32, TS_REDUCE_MIN, &q));
  CHECK_OK(ts_comm_wait(q));
  ts_comm_req_free(q);
  g_off = (size_t)R * n3;
  EXPECT_ELEMS("ireduce_scatter_block", TS_F32, rso, n3, ref_elem(TS_F32, TS_REDUCE_MIN, i, P, src_rank_off));
  free(rs);
  free(rso);
  free(a);
  free(ao);
  free(b);
  free(g);
  free(go);
  free(hs);
  free(ho);
  free(bc);
}

/* Several 16-bit allreduces in flight at once (the data-parallel bucket pattern), polled and
 * waited in an order that differs by rank: their second stages must still pair up. Interleaved
 * with f32 ones and a blocking collective on the same communicator. */
static void test_many_inflight16(void) {
  enum { K = 9 };
  const size_t n = 777;
  uint16_t *buf[K];
  float *f = xalloc(n, TS_F32);
  ts_comm_req *q[K] = {0}, *qf = NULL;
  for (int k = 0; k < K; k++) {
    ts_dtype dt = k % 3 == 2 ? TS_F16 : TS_BF16;
    buf[k] = xalloc(n + (size_t)k, dt);
    for (size_t i = 0; i < n + (size_t)k; i++)
      ((uint16_t *)buf[k])[i] = dt == TS_BF16 ? ts_f32_to_bf16((float)val(R, i + (size_t)k))
                                              : ts_f32_to_f16((float)val(R, i + (size_t)k));
    CHECK_OK(ts_comm_iallreduce(W, buf[k], buf[k], n + (size_t)k, dt, TS_REDUCE_SUM, &q[k]));
    if (k == 4) {
      for (size_t i = 0; i < n; i++) f[i] = (float)val(R, i);
      CHECK_OK(ts_comm_iallreduce(W, f, f, n, TS_F32, TS_REDUCE_MAX, &qf));
    }
  }
  int64_t one = 1, cnt = 0;
  CHECK_OK(ts_comm_allreduce(W, &one, &cnt, 1, TS_I64, TS_REDUCE_SUM));
  CHECK(cnt == P);
  int ok = qf != NULL;
  for (int k = 0; k < K; k++) ok &= q[k] != NULL;
  if (ok) {
    /* odd ranks poll newest first, even ranks oldest first; then wait in a rank-rotated order */
    for (int sweep = 0; sweep < 50; sweep++)
      for (int j = 0; j < K; j++) {
        int k = R % 2 ? K - 1 - j : j, done = 0;
        CHECK_OK(ts_comm_test(q[k], &done));
      }
    for (int j = 0; j < K; j++) CHECK_OK(ts_comm_wait(q[(j + R * 4) % K]));
    CHECK_OK(ts_comm_wait(qf));
    for (int k = 0; k < K; k++) {
      ts_dtype dt = k % 3 == 2 ? TS_F16 : TS_BF16;
      int off = k;
      char what[48];
      snprintf(what, sizeof what, "in flight #%d", k);
      EXPECT_ELEMS(what, dt, buf[k], n + (size_t)k, ref_elem(dt, TS_REDUCE_SUM, i + (size_t)off, P, src_rank));
    }
    EXPECT_ELEMS("in flight f32", TS_F32, f, n, ref_elem(TS_F32, TS_REDUCE_MAX, i, P, src_rank));
  }
  for (int k = 0; k < K; k++) {
    ts_comm_req_free(q[k]);
    free(buf[k]);
  }
  ts_comm_req_free(qf);
  free(f);
}

/* ---- communicators: rank lists, split, grid axes ---- */
static void check_sum_of_members(ts_comm *c, const int *members, int n, const char *what) {
  int64_t mine = R, sum = -1, want = 0;
  for (int i = 0; i < n; i++) want += members[i];
  CHECK_OK(ts_comm_allreduce(c, &mine, &sum, 1, TS_I64, TS_REDUCE_SUM));
  CHECK_MSG(sum == want, "rank %d: %s: sum of world ranks %lld, expected %lld", R, what,
            (long long)sum, (long long)want);
  int32_t me32 = R, *all = xalloc((size_t)n, TS_I32);
  CHECK_OK(ts_comm_allgather(c, &me32, all, 1, TS_I32));
  for (int i = 0; i < n; i++)
    CHECK_MSG(all[i] == members[i], "rank %d: %s: member %d is world rank %d, expected %d", R, what, i,
              all[i], members[i]);
  free(all);
}

static void test_grid(int ndim, const int *dims) {
  for (int axis = 0; axis < ndim; axis++) {
    ts_comm *a = NULL;
    CHECK_OK(ts_comm_grid_axis(W, ndim, dims, axis, &a));
    if (!a) continue;
    int co[8], cq[8], members[64], n = 0;
    CHECK_OK(ts_comm_grid_coords(R, ndim, dims, co));
    for (int q = 0; q < P; q++) {
      ts_comm_grid_coords(q, ndim, dims, cq);
      int same = 1;
      for (int k = 0; k < ndim; k++)
        if (k != axis && cq[k] != co[k]) same = 0;
      if (same) members[n++] = q; /* ascending q = ascending coordinate on axis */
    }
    CHECK(ts_comm_size(a) == dims[axis]);
    CHECK(ts_comm_rank(a) == co[axis]);
    CHECK(ts_comm_world_rank(a) == R);
    char what[64];
    snprintf(what, sizeof what, "grid ndim %d axis %d", ndim, axis);
    check_sum_of_members(a, members, n, what);
    ts_comm_free(a);
  }
}

static void test_groups(void) {
  int evens[64], ne = 0, rev[64];
  for (int r = 0; r < P; r += 2) evens[ne++] = r;
  for (int r = 0; r < P; r++) rev[r] = P - 1 - r;
  ts_comm *g = NULL;
  CHECK_OK(ts_comm_group(W, evens, ne, &g));
  if (R % 2 == 0) {
    CHECK(g != NULL);
    CHECK(ts_comm_size(g) == ne && ts_comm_rank(g) == R / 2);
    if (g) check_sum_of_members(g, evens, ne, "group of even ranks");
  } else {
    CHECK(g == NULL);
  }
  ts_comm_free(g);
  CHECK_OK(ts_comm_group(W, rev, P, &g));
  CHECK(g && ts_comm_rank(g) == P - 1 - R);
  if (g) check_sum_of_members(g, rev, P, "reversed group");
  /* non-blocking and bf16 on a sub-communicator */
  if (g) {
    uint16_t x[7];
    for (int i = 0; i < 7; i++) x[i] = ts_f32_to_bf16((float)val(R, (size_t)i));
    ts_comm_req *q = NULL;
    CHECK_OK(ts_comm_iallreduce(g, x, x, 7, TS_BF16, TS_REDUCE_SUM, &q));
    CHECK_OK(ts_comm_wait(q));
    ts_comm_req_free(q);
    EXPECT_ELEMS("group bf16 allreduce", TS_BF16, x, 7, ref_elem(TS_BF16, TS_REDUCE_SUM, i, P, src_rank));
  }
  ts_comm_free(g);

  /* bad lists: the same on every rank, rejected before any communication */
  int dup2[2] = {0, 0}, out1[1] = {P};
  CHECK(ts_comm_group(W, dup2, 2, &g) == TS_EINVAL && g == NULL);
  CHECK(ts_comm_group(W, out1, 1, &g) == TS_EINVAL && g == NULL);
  /* ranks passing different lists: every rank gets TS_ECOMM, W stays usable */
  if (P >= 2) {
    int l0[1] = {0}, l1[2] = {0, 1};
    int rc = R == 0 ? ts_comm_group(W, l0, 1, &g) : ts_comm_group(W, l1, 2, &g);
    CHECK(rc == TS_ECOMM && g == NULL);
    CHECK_MSG(strstr(ts_last_error(), "different arguments") != NULL, "%s", ts_last_error());
    CHECK_OK(ts_comm_barrier(W));
  }

  /* split: parity, reversed by key; rank 0 opts out */
  ts_comm *s = NULL;
  CHECK_OK(ts_comm_split(W, R == 0 ? -1 : R % 2, -R, &s));
  if (R == 0) {
    CHECK(s == NULL);
  } else {
    int members[64], n = 0;
    for (int q = P - 1; q >= 1; q--)
      if (q % 2 == R % 2) members[n++] = q;
    CHECK(s && ts_comm_size(s) == n);
    if (s) check_sum_of_members(s, members, n, "split");
  }
  ts_comm_free(s);

  /* grids */
  int d1[1] = {P}, d2[2] = {1, P}, d3[2] = {P, 1};
  test_grid(1, d1);
  test_grid(2, d2);
  test_grid(2, d3);
  if (P == 4) {
    int g22[2] = {2, 2}, g212[3] = {2, 1, 2};
    test_grid(2, g22);
    test_grid(3, g212);
    /* spelled out: rows {0,1},{2,3} (axis 1) and columns {0,2},{1,3} (axis 0) */
    ts_comm *row = NULL, *col = NULL;
    CHECK_OK(ts_comm_grid_axis(W, 2, g22, 1, &row));
    CHECK_OK(ts_comm_grid_axis(W, 2, g22, 0, &col));
    int rows[2] = {R / 2 * 2, R / 2 * 2 + 1}, cols[2] = {R % 2, R % 2 + 2};
    check_sum_of_members(row, rows, 2, "2x2 row");
    check_sum_of_members(col, cols, 2, "2x2 column");
    ts_comm_free(row);
    ts_comm_free(col);
  }
  if (P == 2) {
    int g21[2] = {2, 1};
    test_grid(2, g21);
  }
  int bad[2] = {P + 1, 1};
  ts_comm *x = NULL;
  CHECK(ts_comm_grid_axis(W, 2, bad, 0, &x) == TS_EINVAL && x == NULL);
  CHECK(ts_comm_grid_axis(W, 1, d1, 1, &x) == TS_EINVAL && x == NULL);

  ts_comm *d = NULL;
  CHECK_OK(ts_comm_dup(W, &d));
  CHECK(d && ts_comm_size(d) == P && ts_comm_rank(d) == R && ts_comm_seq(d) == 0);
  CHECK_OK(ts_comm_barrier(d));
  CHECK(ts_comm_seq(d) == 1);
  ts_comm_free(d);
}

/* ---- argument errors (local, identical on all ranks) ---- */
static void test_errors(void) {
  uint8_t u[4] = {0};
  float f[8] = {0};
  uint64_t seq = ts_comm_seq(W);
  CHECK(ts_comm_allreduce(W, u, u, 4, TS_U8, TS_REDUCE_SUM) == TS_EDTYPE);
  CHECK(ts_comm_allreduce(W, f, f + 1, 4, TS_F32, TS_REDUCE_SUM) == TS_EINVAL);
  CHECK(ts_comm_allreduce(W, f, f, 4, TS_F32, (ts_reduce_op)9) == TS_EINVAL);
  CHECK(ts_comm_allreduce(W, f, f, (size_t)1 << 32, TS_F32, TS_REDUCE_SUM) == TS_ERANGE);
  CHECK(ts_comm_allreduce(W, NULL, f, 4, TS_F32, TS_REDUCE_SUM) == TS_EINVAL);
  CHECK(ts_comm_broadcast(W, f, 4, TS_F32, P) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "broadcast") != NULL, "%s", ts_last_error());
  CHECK(ts_comm_send(W, f, 4, TS_F32, P, 0) == TS_EINVAL);
  CHECK(ts_comm_send(W, f, 4, TS_F32, 0, -1) == TS_EINVAL);
  CHECK(ts_comm_allreduce(NULL, f, f, 4, TS_F32, TS_REDUCE_SUM) == TS_EINVAL);
  CHECK(ts_comm_seq(W) == seq); /* rejected calls issue nothing */
  char d[256];
  CHECK_OK(ts_comm_barrier(W));
  ts_comm_describe(W, d, sizeof d);
  char want[96];
  snprintf(want, sizeof want, "rank %d: %llu collectives issued, last barrier #%llu, done", R,
           (unsigned long long)seq + 1, (unsigned long long)seq);
  CHECK_MSG(strcmp(d, want) == 0, "%s", d);
  CHECK_OK(ts_comm_init(NULL, NULL)); /* idempotent */
}

/* ---- debug consistency check ---- */
static void test_debug_check(void) {
  /* no false alarms: one of each collective with the check on */
  ts_comm_set_debug_check(1);
  static const size_t small[] = {0, 7};
  test_allreduce(small, 2);
  test_allgather(small, 2);
  test_reduce_scatter(small, 2);
  test_broadcast(small, 2);
  test_alltoall(small, 2);
  test_nonblocking();
  CHECK_OK(ts_comm_barrier(W));
  if (P >= 2) {
    ts_comm *d = NULL;
    CHECK_OK(ts_comm_dup(W, &d));
    float *a = xalloc(1000 * (size_t)P, TS_F32), *b = xalloc(1000 * (size_t)P, TS_F32);
    CHECK_OK(ts_comm_barrier(d)); /* #0 */
    int rc = R == 0 ? ts_comm_allreduce(d, a, b, 1000, TS_F32, TS_REDUCE_SUM)
                    : ts_comm_allgather(d, a, b, 500, TS_F32);
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(),
                     "collective #1: rank 0 issued allreduce(sum) f32 x 1000, rank 1 "
                     "issued allgather f32 x 500") != NULL,
              "rank %d: %s", R, ts_last_error());
    CHECK(!ts_comm_failed(d));
    /* every rank stopped before the real collective: d is still in step */
    for (int i = 0; i < 3; i++) a[i] = (float)R;
    CHECK_OK(ts_comm_allreduce(d, a, b, 3, TS_F32, TS_REDUCE_MAX));
    CHECK(b[0] == (float)(P - 1));
    /* different roots */
    rc = ts_comm_broadcast(d, a, 3, TS_F32, R == 0 ? 0 : 1);
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(), "root 0") && strstr(ts_last_error(), "root 1"), "%s", ts_last_error());
    free(a);
    free(b);
    ts_comm_free(d);
  }
  ts_comm_set_debug_check(0);
}

/* ---- the watchdog ---- */
static float g_late[16], g_late_out[16]; /* static: a timed-out call's buffers must stay valid */

static void test_timeout(void) {
  /* a receive nobody sends: cancelled after the timeout, the communicator stays usable */
  float x[4];
  ts_comm_set_timeout(0.5);
  double t0 = ts_time_now();
  int rc = ts_comm_recv(W, x, 4, TS_F32, R, 77);
  double dt = ts_time_now() - t0;
  ts_comm_set_timeout(300);
  CHECK(rc == TS_ECOMM);
  CHECK_MSG(strstr(ts_last_error(), "recv (f32 x 4, from") && strstr(ts_last_error(), "within 0.5 s"),
            "%s", ts_last_error());
  CHECK_MSG(dt >= 0.45 && dt < 5, "recv timeout after %.2f s", dt);
  CHECK(!ts_comm_failed(W));
  CHECK_OK(ts_comm_barrier(W));
  if (P < 2) return;

  /* a collective rank 1 never issues: the others time out after 2 s with a message */
  ts_comm *d = NULL;
  CHECK_OK(ts_comm_dup(W, &d));
  if (R != 1) {
    ts_comm_set_timeout(2);
    t0 = ts_time_now();
    rc = ts_comm_allreduce(d, g_late, g_late_out, 10, TS_F32, TS_REDUCE_SUM);
    dt = ts_time_now() - t0;
    ts_comm_set_timeout(300);
    CHECK(rc == TS_ECOMM);
    char want[128];
    snprintf(want, sizeof want, "rank %d: allreduce(sum) #0 (f32 x 10) did not complete within 2 s", R);
    CHECK_MSG(strstr(ts_last_error(), want) && strstr(ts_last_error(), ": rank 1 of ") && strstr(ts_last_error(), "never reached it (stalled or dead)"),
              "rank %d: %s", R, ts_last_error());
    CHECK_MSG(dt >= 1.9 && dt < 10, "timeout after %.2f s", dt);
    CHECK(ts_comm_failed(d));
    t0 = ts_time_now();
    CHECK(ts_comm_barrier(d) == TS_ECOMM); /* fails fast */
    CHECK(ts_time_now() - t0 < 0.5);
    CHECK_MSG(strstr(ts_last_error(), "unusable") != NULL, "%s", ts_last_error());
  }
  ts_comm_free(d); /* the timed-out request stays with the library until finalize */
  CHECK_OK(ts_comm_barrier(W));

  /* ts_comm_wait times out but leaves the request in flight; a late peer completes it */
  CHECK_OK(ts_comm_dup(W, &d));
  float v[3] = {1, 2, 3}, o[3] = {0};
  ts_comm_req *q = NULL;
  if (R != 1) {
    CHECK_OK(ts_comm_iallreduce(d, v, o, 3, TS_F32, TS_REDUCE_SUM, &q));
    ts_comm_set_timeout(0.5);
    rc = ts_comm_wait(q);
    ts_comm_set_timeout(300);
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(), "still in flight") != NULL, "%s", ts_last_error());
    CHECK(!ts_comm_failed(d));
  }
  CHECK_OK(ts_comm_barrier(W));
  if (R == 1) CHECK_OK(ts_comm_iallreduce(d, v, o, 3, TS_F32, TS_REDUCE_SUM, &q));
  CHECK_OK(ts_comm_wait(q));
  ts_comm_req_free(q);
  CHECK(o[0] == (float)P && o[2] == (float)(3 * P));
  ts_comm_free(d);
  CHECK_OK(ts_comm_barrier(W));
}

/* ---- native blocking calls (ts_comm_set_blocking) give the polled path's results ---- */
/* Random inputs, each rank its own; the polled path runs on one duplicate of the world, the
 * native one on another, and the results are compared byte for byte where they must be equal:
 * data movement always; bf16/f16 reductions always (the library sums in rank order itself);
 * i32/i64 (exact); f32 on 1 or 2 ranks (a + b either way round). On 3 or more ranks MPI's
 * blocking and non-blocking algorithms may add f32 in different orders (OpenMPI 4.1 here: some
 * reduce-scatters on 3 and 4 ranks): there the native result must be the same on every rank and
 * within rounding of the polled one. */
static uint64_t fnv(const void *p, size_t bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
  return h;
}

/* x[0..n) of dt, random, this rank's (seed: which input). */
static void fill_rand(ts_dtype dt, void *x, size_t n, uint64_t seed) {
  float *f = xalloc(n, TS_F32);
  ts_test_fill(f, n, seed * 1000003ULL + (uint64_t)R * 7919ULL + 11, -1.0f, 1.0f);
  if (dt == TS_I32 || dt == TS_I64 || dt == TS_U8)
    for (size_t i = 0; i < n; i++) put(dt, x, i, floorf(f[i] * 1000.0f));
  else if (dt == TS_F32) memcpy(x, f, n * sizeof(float));
  else ts_convert(f, TS_F32, x, dt, n);
  free(f);
}

static int g_native_fp_diff; /* f32 elements that differed (3+ ranks), reported */

/* The polled result a against the native b (n elements of dt); `what` starting "allreduce": the
 * same result on every rank. */
static void same_result(const char *what, ts_dtype dt, ts_reduce_op op, const void *a, const void *b, size_t n) {
  size_t bytes = n * ts_dtype_size(dt);
  int exact = dt != TS_F32 || P <= 2 || op == TS_REDUCE_MAX || op == TS_REDUCE_MIN || (int)op < 0;
  if (exact) {
    size_t at = 0;
    while (at < bytes && ((const unsigned char *)a)[at] == ((const unsigned char *)b)[at]) at++;
    CHECK_MSG(at == bytes, "rank %d: %s (%s x %zu): native differs from polled at element %zu (%.9g vs %.9g)", R, what,
              ts_dtype_name(dt), n, at / ts_dtype_size(dt), get(dt, b, at / ts_dtype_size(dt)),
              get(dt, a, at / ts_dtype_size(dt)));
    return;
  }
  /* f32 sums on 3+ ranks: within rounding, and the same bits on every rank */
  const float *x = a, *y = b;
  for (size_t i = 0; i < n; i++) {
    g_native_fp_diff += x[i] != y[i];
    CHECK_MSG(fabsf(x[i] - y[i]) <= 1e-6f * (float)P, "rank %d: %s [%zu]: native %.9g, polled %.9g", R, what, i,
              (double)y[i], (double)x[i]);
  }
  if (strncmp(what, "allreduce", 9)) return;
  uint64_t h = fnv(b, bytes), all[64];
  CHECK_OK(ts_comm_allgather(W, &h, all, 8, TS_U8));
  for (int r = 0; r < P; r++) CHECK_MSG(all[r] == h, "%s: rank %d's native result differs from rank %d's", what, r, R);
}

static void test_native(void) {
  ts_comm *pc = NULL, *nc = NULL, *d = NULL;
  CHECK(ts_comm_set_blocking(NULL, TS_COMM_BLOCKING_NATIVE) == TS_EINVAL);
  CHECK(ts_comm_get_blocking(NULL) == TS_COMM_BLOCKING_POLLED);
  CHECK_OK(ts_comm_dup(W, &pc));
  CHECK_OK(ts_comm_dup(W, &nc));
  if (!pc || !nc) return;
  CHECK(ts_comm_get_blocking(pc) == TS_COMM_BLOCKING_POLLED); /* the default */
  CHECK(ts_comm_set_blocking(nc, (ts_comm_blocking)7) == TS_EINVAL);
  CHECK_MSG(strstr(ts_last_error(), "mode 7") != NULL, "%s", ts_last_error());
  CHECK_OK(ts_comm_set_blocking(nc, TS_COMM_BLOCKING_NATIVE));
  CHECK(ts_comm_get_blocking(nc) == TS_COMM_BLOCKING_NATIVE);
  CHECK_OK(ts_comm_dup(nc, &d)); /* made from a native communicator: native */
  CHECK(d && ts_comm_get_blocking(d) == TS_COMM_BLOCKING_NATIVE);
  ts_comm_free(d);

  static const size_t sizes[] = {1, 7, 1000, 65537, 262147};
  static const ts_reduce_op ops[] = {TS_REDUCE_SUM, TS_REDUCE_MEAN, TS_REDUCE_MAX, TS_REDUCE_MIN};
  for (int si = 0; si < 5; si++) {
    size_t n = sizes[si];
    for (int di = 0; di < NRED; di++) {
      ts_dtype dt = k_red[di];
      size_t es = ts_dtype_size(dt);
      void *x = xalloc(n * (size_t)P, dt), *a = xalloc(n * (size_t)P, dt), *b = xalloc(n * (size_t)P, dt);
      for (int oi = 0; oi < 4; oi++) {
        ts_reduce_op op = ops[oi];
        char what[96];
        fill_rand(dt, x, n, (uint64_t)(si * 100 + di * 10 + oi));
        snprintf(what, sizeof what, "allreduce(%s)", ts_reduce_op_name(op));
        CHECK_OK(ts_comm_allreduce(pc, x, a, n, dt, op));
        CHECK_OK(ts_comm_allreduce(nc, x, b, n, dt, op));
        same_result(what, dt, op, a, b, n);
        memcpy(b, x, n * es); /* in place */
        CHECK_OK(ts_comm_allreduce(nc, b, b, n, dt, op));
        same_result("allreduce in place", dt, op, a, b, n);
        if (op == TS_REDUCE_MAX) continue;
        /* reduce-scatter, equal blocks and uneven ones (the first total % P one larger) */
        fill_rand(dt, x, n * (size_t)P, (uint64_t)(7 + si * 100 + di * 10 + oi));
        snprintf(what, sizeof what, "reduce_scatter_block(%s)", ts_reduce_op_name(op));
        CHECK_OK(ts_comm_reduce_scatter_block(pc, x, a, n, dt, op));
        CHECK_OK(ts_comm_reduce_scatter_block(nc, x, b, n, dt, op));
        same_result(what, dt, op, a, b, n);
        size_t counts[64];
        ts_comm_block_counts(n * (size_t)P - 1, P, counts);
        snprintf(what, sizeof what, "reduce_scatter(%s)", ts_reduce_op_name(op));
        CHECK_OK(ts_comm_reduce_scatter(pc, x, a, counts, dt, op));
        CHECK_OK(ts_comm_reduce_scatter(nc, x, b, counts, dt, op));
        same_result(what, dt, op, a, b, counts[R]);
      }
      free(x);
      free(a);
      free(b);
    }
    /* data movement, every dtype */
    for (int di = 0; di < NALL; di++) {
      ts_dtype dt = k_all[di];
      size_t es = ts_dtype_size(dt), tot = n * (size_t)P;
      void *x = xalloc(tot, dt), *a = xalloc(tot, dt), *b = xalloc(tot, dt);
      fill_rand(dt, x, tot, (uint64_t)(50 + si * 10 + di));
      CHECK_OK(ts_comm_allgather(pc, x, a, n, dt));
      CHECK_OK(ts_comm_allgather(nc, x, b, n, dt));
      same_result("allgather", dt, (ts_reduce_op)-1, a, b, tot);
      memcpy((char *)b + (size_t)R * n * es, x, n * es); /* in place */
      CHECK_OK(ts_comm_allgather(nc, (char *)b + (size_t)R * n * es, b, n, dt));
      same_result("allgather in place", dt, (ts_reduce_op)-1, a, b, tot);
      size_t counts[64];
      ts_comm_block_counts(tot - 1, P, counts);
      CHECK_OK(ts_comm_allgatherv(pc, x, a, counts, NULL, dt));
      CHECK_OK(ts_comm_allgatherv(nc, x, b, counts, NULL, dt));
      same_result("allgatherv", dt, (ts_reduce_op)-1, a, b, tot - 1);
      memcpy(a, x, n * es);
      memcpy(b, x, n * es);
      CHECK_OK(ts_comm_broadcast(pc, a, n, dt, P - 1));
      CHECK_OK(ts_comm_broadcast(nc, b, n, dt, P - 1));
      same_result("broadcast", dt, (ts_reduce_op)-1, a, b, n);
      CHECK_OK(ts_comm_alltoall(pc, x, a, n, dt));
      CHECK_OK(ts_comm_alltoall(nc, x, b, n, dt));
      same_result("alltoall", dt, (ts_reduce_op)-1, a, b, tot);
      ts_comm_block_counts(tot, P, counts); /* every rank sends counts[j] to j, receives counts[R] from each */
      size_t rcounts[64];
      for (int r = 0; r < P; r++) rcounts[r] = counts[R];
      CHECK_OK(ts_comm_alltoallv(pc, x, counts, NULL, a, rcounts, NULL, dt));
      CHECK_OK(ts_comm_alltoallv(nc, x, counts, NULL, b, rcounts, NULL, dt));
      same_result("alltoallv", dt, (ts_reduce_op)-1, a, b, counts[R] * (size_t)P);
      free(x);
      free(a);
      free(b);
    }
  }
  CHECK_OK(ts_comm_barrier(nc));

  /* non-blocking requests on a native communicator stay non-blocking: bf16 ones in flight
   * around a native bf16 allreduce on the same communicator, waited in an order that differs by
   * rank (their second stages keep their own order on the stage-2 communicator) */
  enum { NQ = 3, NE = 1001 };
  uint16_t *in[NQ + 1], *pa = xalloc(NE, TS_BF16);
  ts_comm_req *q[NQ] = {0};
  for (int k = 0; k <= NQ; k++) {
    in[k] = xalloc(NE, TS_BF16);
    fill_rand(TS_BF16, in[k], NE, (uint64_t)(900 + k));
  }
  CHECK_OK(ts_comm_allreduce(pc, in[NQ], pa, NE, TS_BF16, TS_REDUCE_SUM)); /* the reference of the native one */
  uint16_t *ref[NQ];
  for (int k = 0; k < NQ; k++) {
    ref[k] = xalloc(NE, TS_BF16);
    CHECK_OK(ts_comm_allreduce(pc, in[k], ref[k], NE, TS_BF16, TS_REDUCE_MEAN));
  }
  for (int k = 0; k < NQ; k++) CHECK_OK(ts_comm_iallreduce(nc, in[k], in[k], NE, TS_BF16, TS_REDUCE_MEAN, &q[k]));
  CHECK_OK(ts_comm_allreduce(nc, in[NQ], in[NQ], NE, TS_BF16, TS_REDUCE_SUM));
  same_result("native bf16 allreduce among requests in flight", TS_BF16, TS_REDUCE_SUM, pa, in[NQ], NE);
  for (int j = 0; j < NQ; j++) {
    int k = R % 2 ? NQ - 1 - j : j;
    CHECK_OK(ts_comm_wait(q[k]));
    ts_comm_req_free(q[k]);
    same_result("bf16 request on a native communicator", TS_BF16, TS_REDUCE_MEAN, ref[k], in[k], NE);
  }
  for (int k = 0; k <= NQ; k++) free(in[k]);
  for (int k = 0; k < NQ; k++) free(ref[k]);
  free(pa);

  /* the debug check tells a native call from a polled one (MPI would not match them) */
  if (P > 1) {
    ts_comm_set_debug_check(1);
    CHECK_OK(ts_comm_dup(W, &d));
    if (d && R == 0) CHECK_OK(ts_comm_set_blocking(d, TS_COMM_BLOCKING_NATIVE));
    float v[4] = {1, 2, 3, 4};
    int rc = d ? ts_comm_allreduce(d, v, v, 4, TS_F32, TS_REDUCE_SUM) : TS_OK;
    CHECK(rc == TS_ECOMM);
    CHECK_MSG(strstr(ts_last_error(), "rank 0 issued allreduce(sum) f32 x 4 (native blocking), rank 1 issued "
                                      "allreduce(sum) f32 x 4 (polled)") != NULL,
              "rank %d: %s", R, ts_last_error());
    if (d) CHECK_OK(ts_comm_set_blocking(d, TS_COMM_BLOCKING_NATIVE)); /* the check ran first: d is usable */
    CHECK_OK(d ? ts_comm_allreduce(d, v, v, 4, TS_F32, TS_REDUCE_SUM) : TS_OK);
    CHECK(v[3] == 4.0f * (float)P);
    ts_comm_free(d);
    ts_comm_set_debug_check(0);
  }
  if (R == 0 && P > 2)
    printf("native vs polled: %d f32 sums on %d ranks differ in rounding (MPI's algorithms)\n", g_native_fp_diff, P);
  ts_comm_free(pc);
  ts_comm_free(nc);
}

/* A broken world communicator would make every later section fail or wait: end the job. */
static void stop_if_broken(const char *after) {
  if (!ts_comm_failed(W)) return;
  fprintf(stderr, "rank %d: world communicator failed after %s: %s\n", R, after, ts_last_error());
  ts_comm_abort(W, 3);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&W));
  if (!W) return 1;
  R = ts_comm_rank(W);
  P = ts_comm_size(W);
  if (P > 64) {
    fprintf(stderr, "test_comm: at most 64 ranks\n");
    return 1;
  }
  CHECK(ts_comm_world_rank(W) == R);
  test_errors();
  stop_if_broken("test_errors");
  test_allreduce(k_sizes, NSIZES);
  stop_if_broken("test_allreduce");
  test_rounding16();
  stop_if_broken("test_rounding16");
  test_allgather(k_sizes, NSIZES);
  stop_if_broken("test_allgather");
  test_reduce_scatter(k_sizes, NSIZES);
  stop_if_broken("test_reduce_scatter");
  test_broadcast(k_sizes, NSIZES);
  stop_if_broken("test_broadcast");
  test_alltoall(k_sizes, NSIZES);
  stop_if_broken("test_alltoall");
  test_p2p();
  stop_if_broken("test_p2p");
  CHECK_OK(ts_comm_barrier(W));
  test_nonblocking();
  stop_if_broken("test_nonblocking");
  test_many_inflight16();
  stop_if_broken("test_many_inflight16");
  test_groups();
  stop_if_broken("test_groups");
  test_debug_check();
  stop_if_broken("test_debug_check");
  test_native();
  stop_if_broken("test_native");
  test_timeout();
  stop_if_broken("test_timeout");
  CHECK_OK(ts_comm_finalize());
  CHECK_OK(ts_comm_finalize());
  CHECK(ts_comm_init(NULL, NULL) == TS_ECOMM); /* MPI cannot start again */
  if (R == 0 || ts_test_failures) {
    char name[32];
    snprintf(name, sizeof name, "test_comm (rank %d of %d)", R, P);
    return ts_test_finish(name);
  }
  return 0;
}
