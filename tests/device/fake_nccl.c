/* A stand-in for NCCL (libnccl.so.2) on machines without a GPU, loaded through TESSERA_LIBNCCL into
 * each process of an MPI job beside the stand-in driver (fake_cuda.c, whose "device memory" is host
 * memory): the communicator, collective and send/receive entry points of NCCL 2.x with NCCL's
 * semantics, over POSIX shared memory, so the NCCL path (the unique id broadcast over MPI,
 * communicator init, collectives, grouped send/recv) really moves data between the processes.
 * It checks what NCCL would: arguments (ncclInvalidArgument), ranks claimed twice, a segment made
 * for another nranks and send/receive sizes that do not match (ncclInvalidUsage), and it never
 * hangs: every wait gives up after FAKE_NCCL_TIMEOUT seconds (default 120) with ncclSystemError,
 * and a communicator a peer aborted or gave up on fails with ncclRemoteError.
 * Everything is synchronous (streams are ignored): an operation has completed when its call, or the
 * outermost ncclGroupEnd, returns.
 * The segment, one per communicator, named from the unique id and unlinked as soon as every rank
 * has attached: a control page (attach count, abort flag; per rank its claim and barrier counter;
 * per (sender, receiver) a mailbox's counters and header), then two banks of per-rank staging slots
 * (SLOT bytes), then the mailboxes' data (MBOX bytes each). A collective goes through the slots in
 * chunks, one barrier a chunk: each rank stages its part in its slot of the bank, all meet, each
 * reads what it needs from every slot; the banks alternate, so the next chunk's barrier is what
 * makes a slot free again. Reductions run over the ranks in order 0..n-1, identical everywhere.
 * Groups (per thread, nesting) queue their operations; the outermost ncclGroupEnd runs the
 * collectives in issue order, then moves all the sends and receives together in one polling loop.
 * Environment: FAKE_NCCL_TIMEOUT (seconds, read at each wait), FAKE_NCCL_INIT_FAIL (when set and not
 * 0, ncclCommInitRank's result). fake_nccl_calls counts the collective and send/receive calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef FAKE_NCCL_ABI_CHECK /* -DFAKE_NCCL_ABI_CHECK -I<cuda>/include: every definition against nccl.h */
#include <nccl.h>
#else
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum {
  ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument, ncclInvalidUsage,
  ncclRemoteError, ncclInProgress
} ncclResult_t;
typedef enum { ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg } ncclRedOp_t;
typedef enum {
  ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
  ncclBfloat16
} ncclDataType_t;
typedef struct CUstream_st *cudaStream_t;
#endif

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2, "process-shared atomics must be lock-free");

#define SLOT ((size_t)1 << 20) /* staging bytes per rank and bank */
#define MBOX ((size_t)1 << 19) /* bytes a mailbox carries at a time */
#define MAXRANKS 1024          /* the segment grows as nranks^2 mailboxes (sparse, touched as used) */

int fake_nccl_calls;

/* the segment's control page: 64-byte records, so that ranks do not share cache lines */
typedef struct { atomic_int attached, aborted; char pad[56]; } seghdr;
typedef struct { atomic_int claimed; atomic_uint_least64_t arrive; char pad[48]; } rankctl;
/* one direction between two ranks: the sender may write when posted == taken, the receiver read
 * when posted == taken + 1; the header says which part of which message the data is */
typedef struct { atomic_uint_least64_t posted, taken; uint64_t total, off, len; char pad[24]; } mbox;

struct ncclComm {
  int n, me;
  char *base, *slots, *boxes; /* the mapping, its staging slots, its mailboxes' data */
  size_t size;
  seghdr *h;
  rankctl *rk;
  mbox *mb;
  uint64_t nbar;     /* barriers this rank has passed (its bank is nbar & 1) */
  ncclResult_t err;  /* the asynchronous error: once set, every operation returns it */
  const char **src;  /* nranks pointers, the reduction's inputs */
};

static size_t ctl_bytes(int n) {
  return (sizeof(seghdr) + (size_t)n * sizeof(rankctl) + (size_t)n * (size_t)n * sizeof(mbox) + 4095) & ~(size_t)4095;
}
static size_t seg_bytes(int n) { return ctl_bytes(n) + 2 * (size_t)n * SLOT + (size_t)n * (size_t)n * MBOX; }

/* ---- waiting: every wait polls, yielding the core (4 ranks may share 2), then sleeping a little,
 * and gives up after FAKE_NCCL_TIMEOUT seconds */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
typedef struct { double end; unsigned spins; } waiter;
static void wait_start(waiter *w) {
  const char *v = getenv("FAKE_NCCL_TIMEOUT");
  double t = v && *v ? atof(v) : 120.0;
  w->end = now() + (t > 0 ? t : 120.0);
  w->spins = 0;
}
/* one more poll; 1 when the time is up */
static int wait_more(waiter *w) {
  if (w->spins < 64) sched_yield();
  else {
    struct timespec t = {0, w->spins < 256 ? 20000 : 200000};
    nanosleep(&t, NULL);
  }
  w->spins++;
  return now() > w->end;
}
/* the communicator is broken: its error from now on, and its peers fail too (ncclRemoteError) */
static ncclResult_t fail(struct ncclComm *c, ncclResult_t r) {
  if (!c->err) c->err = r;
  atomic_store(&c->h->aborted, 1);
  return r;
}
/* barrier number ++nbar: until every rank's counter has reached it (a condition met is never an
 * error, even when a peer aborted since: it passed this barrier before it did) */
static ncclResult_t barrier(struct ncclComm *c) {
  uint64_t k = ++c->nbar;
  atomic_store_explicit(&c->rk[c->me].arrive, k, memory_order_release);
  waiter w;
  wait_start(&w);
  for (int r = 0; r < c->n; r++)
    while (atomic_load_explicit(&c->rk[r].arrive, memory_order_acquire) < k) {
      if (atomic_load(&c->h->aborted)) return fail(c, ncclRemoteError);
      if (wait_more(&w)) return fail(c, ncclSystemError);
    }
  return ncclSuccess;
}

/* ---- elements: 16-bit floats to float and back (nearest even, NaN stays NaN) */
static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  float f;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
    f = (float)m * 0x1p-24f;
    memcpy(&u, &f, 4);
    u |= s;
  } else
    u = s | (e == 31 ? 0x7f800000u | m << 13 : (e + 112) << 23 | m << 13);
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t s = (uint16_t)((u >> 16) & 0x8000);
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return s | (u > 0x7f800000u ? 0x7e00 : 0x7c00); /* NaN, or >= 2^16: inf */
  if (u < 0x38800000u) { /* below 2^-14: a subnormal; adding 0.5 lets the FPU round at 2^-24 */
    float a;
    memcpy(&a, &u, 4);
    a += 0.5f;
    memcpy(&u, &a, 4);
    return s | (uint16_t)(u - 0x3f000000u);
  }
  u += 0xc8000fffu + ((u >> 13) & 1); /* rebias the exponent, round to nearest even */
  return s | (uint16_t)(u >> 13);
}
static float b2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2b(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
/* bytes of an element, 0 for a type this stand-in (or NCCL) does not reduce or move */
static size_t dsize(int dt) {
  static const unsigned char s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return dt >= 0 && dt < 10 ? s[dt] : 0;
}
static float ldf(const char *p, int dt, size_t i) {
  if (dt == ncclFloat32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return dt == ncclFloat16 ? h2f(h) : b2f(h);
}
static void stf(char *p, int dt, size_t i, float f) {
  if (dt == ncclFloat32) {
    memcpy(p + 4 * i, &f, 4);
    return;
  }
  uint16_t h = dt == ncclFloat16 ? f2h(f) : f2b(f);
  memcpy(p + 2 * i, &h, 2);
}
/* integers as 64 bits, sign- or zero-extended as their type */
static uint64_t ldi(const char *p, int dt, size_t i) {
  switch (dt) {
  case ncclInt8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
  case ncclUint8: return ((const uint8_t *)p)[i];
  case ncclInt32: { int32_t v; memcpy(&v, p + 4 * i, 4); return (uint64_t)(int64_t)v; }
  case ncclUint32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
  default: { uint64_t v; memcpy(&v, p + 8 * i, 8); return v; }
  }
}
static void sti(char *p, int dt, size_t i, uint64_t v) {
  if (dsize(dt) == 1) ((uint8_t *)p)[i] = (uint8_t)v;
  else if (dsize(dt) == 4) { uint32_t w = (uint32_t)v; memcpy(p + 4 * i, &w, 4); }
  else memcpy(p + 8 * i, &v, 8);
}
static double mx(double a, double b) { return a != a ? b : b > a ? b : a; } /* as fmax: NaN loses */
static double mn(double a, double b) { return a != a ? b : b < a ? b : a; }
/* dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i], i < k, in that order: 16-bit floats in
 * float, rounded once at the end; integers wrap (two's complement); ncclAvg = sum / n, truncating
 * toward zero for integers */
static void reduce(char *dst, const char **src, int n, size_t k, int dt, int op) {
  const int sg = dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64;
  for (size_t i = 0; i < k; i++) {
    if (dt == ncclFloat64) {
      double a, b;
      memcpy(&a, src[0] + 8 * i, 8);
      for (int r = 1; r < n; r++) {
        memcpy(&b, src[r] + 8 * i, 8);
        a = op == ncclProd ? a * b : op == ncclMax ? mx(a, b) : op == ncclMin ? mn(a, b) : a + b;
      }
      if (op == ncclAvg) a /= n;
      memcpy(dst + 8 * i, &a, 8);
    } else if (dt >= ncclFloat16) {
      float a = ldf(src[0], dt, i);
      for (int r = 1; r < n; r++) {
        float b = ldf(src[r], dt, i);
        a = op == ncclProd ? a * b : op == ncclMax ? (float)mx(a, b) : op == ncclMin ? (float)mn(a, b) : a + b;
      }
      if (op == ncclAvg) a /= (float)n;
      stf(dst, dt, i, a);
    } else {
      uint64_t a = ldi(src[0], dt, i);
      for (int r = 1; r < n; r++) {
        uint64_t b = ldi(src[r], dt, i);
        int gt = sg ? (int64_t)b > (int64_t)a : b > a, lt = sg ? (int64_t)b < (int64_t)a : b < a;
        a = op == ncclProd ? a * b : op == ncclMax ? (gt ? b : a) : op == ncclMin ? (lt ? b : a) : a + b;
      }
      if (op == ncclAvg) { /* the sum as its type, then divided */
        char t[8];
        sti(t, dt, 0, a);
        a = ldi(t, dt, 0);
        a = sg ? (uint64_t)((int64_t)a / n) : a / (uint64_t)n;
      }
      sti(dst, dt, i, a);
    }
  }
}

/* ---- operations, and the group that queues them (per thread, as NCCL's) */
enum { ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, SEND, RECV };
typedef struct {
  int kind, dt, op, peer; /* peer: the root of a broadcast */
  struct ncclComm *c;
  const char *s;
  char *d;
  size_t count, done; /* done: bytes sent or received so far */
  int finished;
} op_t;
static _Thread_local struct { int depth, n, cap; ncclResult_t err; op_t *q; } grp;

/* a collective, chunk by chunk through the slots */
static ncclResult_t run_coll(const op_t *o) {
  struct ncclComm *c = o->c;
  const int n = c->n, me = c->me;
  const size_t es = dsize(o->dt), per = SLOT / es / (o->kind == REDUCESCATTER ? (size_t)n : 1);
  for (size_t off = 0; off < o->count; off += per) {
    const size_t k = o->count - off < per ? o->count - off : per, kb = k * es;
    char *bank = c->slots + (size_t)(c->nbar & 1) * (size_t)n * SLOT, *mine = bank + (size_t)me * SLOT;
    if (o->kind == ALLREDUCE || o->kind == ALLGATHER || (o->kind == BROADCAST && me == o->peer))
      memcpy(mine, o->s + off * es, kb);
    else if (o->kind == REDUCESCATTER) /* every block's part of this chunk */
      for (int b = 0; b < n; b++) memcpy(mine + (size_t)b * kb, o->s + ((size_t)b * o->count + off) * es, kb);
    ncclResult_t r = barrier(c);
    if (r) return r;
    for (int i = 0; i < n; i++) c->src[i] = bank + (size_t)i * SLOT + (o->kind == REDUCESCATTER ? (size_t)me * kb : 0);
    if (o->kind == ALLREDUCE || o->kind == REDUCESCATTER) reduce(o->d + off * es, c->src, n, k, o->dt, o->op);
    else if (o->kind == ALLGATHER)
      for (int i = 0; i < n; i++) memcpy(o->d + ((size_t)i * o->count + off) * es, c->src[i], kb);
    else memcpy(o->d + off * es, c->src[o->peer], kb);
  }
  return ncclSuccess;
}

/* every send and receive of q at once: each moves a chunk whenever its mailbox allows, the ones
 * to (from) the same peer one after the other in issue order */
static ncclResult_t run_p2p(op_t *q, int nq) {
  waiter w;
  wait_start(&w);
  for (;;) {
    int pending = 0, moved = 0;
    for (int i = 0; i < nq; i++) {
      op_t *o = &q[i];
      if (o->kind < SEND || o->finished) continue;
      pending++;
      int blocked = 0;
      for (int j = 0; j < i && !blocked; j++)
        blocked = q[j].kind == o->kind && q[j].c == o->c && q[j].peer == o->peer && !q[j].finished;
      if (blocked) continue;
      struct ncclComm *c = o->c;
      const size_t box = (size_t)(o->kind == SEND ? c->me * c->n + o->peer : o->peer * c->n + c->me);
      const size_t bytes = o->count * dsize(o->dt);
      mbox *m = &c->mb[box];
      char *data = c->boxes + box * MBOX;
      uint64_t posted = atomic_load_explicit(&m->posted, memory_order_acquire);
      uint64_t taken = atomic_load_explicit(&m->taken, memory_order_acquire);
      if (o->kind == SEND && posted == taken) {
        size_t len = bytes - o->done < MBOX ? bytes - o->done : MBOX;
        if (len) memcpy(data, o->s + o->done, len);
        m->total = bytes, m->off = o->done, m->len = len;
        atomic_store_explicit(&m->posted, posted + 1, memory_order_release);
        o->done += len;
      } else if (o->kind == RECV && posted != taken) {
        if (m->total != bytes || m->off != o->done) return fail(c, ncclInvalidUsage); /* sizes differ */
        if (m->len) memcpy(o->d + o->done, data, m->len);
        o->done += m->len;
        atomic_store_explicit(&m->taken, taken + 1, memory_order_release);
      } else continue;
      moved = 1;
      o->finished = o->done == bytes; /* a message of 0 bytes is one empty chunk */
    }
    if (!pending) return ncclSuccess;
    if (moved) {
      wait_start(&w);
      continue;
    }
    int late = wait_more(&w);
    for (int i = 0; i < nq; i++)
      if (q[i].kind >= SEND && !q[i].finished) {
        if (atomic_load(&q[i].c->h->aborted)) return fail(q[i].c, ncclRemoteError);
        if (late) return fail(q[i].c, ncclSystemError);
      }
  }
}

/* an operation whose arguments were checked: now, or queued until the outermost ncclGroupEnd */
static ncclResult_t submit(op_t o) {
  __atomic_fetch_add(&fake_nccl_calls, 1, __ATOMIC_RELAXED);
  if (!grp.depth) return o.kind >= SEND ? run_p2p(&o, 1) : run_coll(&o);
  if (grp.n == grp.cap) {
    int cap = grp.cap ? 2 * grp.cap : 16;
    op_t *q = realloc(grp.q, (size_t)cap * sizeof *q);
    if (!q) return grp.err = ncclSystemError;
    grp.q = q, grp.cap = cap;
  }
  grp.q[grp.n++] = o;
  return ncclSuccess;
}
/* an argument refused: returned now, and by the group's end (which then runs nothing), as NCCL */
static ncclResult_t refuse(ncclResult_t r) {
  if (grp.depth && !grp.err) grp.err = r;
  return r;
}
static ncclResult_t check(struct ncclComm *c, int dt, int op, size_t count, const void *a, const void *b) {
  if (!c || !dsize(dt) || op < ncclSum || op > ncclAvg || (count && (!a || !b))) return refuse(ncclInvalidArgument);
  return c->err ? refuse(c->err) : ncclSuccess;
}
static ncclResult_t coll(int kind, const void *s, void *d, size_t count, int dt, int op, int root, ncclComm_t c) {
  if (c && (root < 0 || root >= c->n)) return refuse(ncclInvalidArgument);
  ncclResult_t r = check(c, dt, op, count, kind == BROADCAST && c && c->me != root ? d : s, d);
  if (r) return r;
  if (!count) { /* counted; nothing to move, nobody to wait for */
    __atomic_fetch_add(&fake_nccl_calls, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
  }
  return submit((op_t){.kind = kind, .dt = dt, .op = op, .peer = root, .c = c, .s = s, .d = d, .count = count});
}

/* ---- the API */
ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = 22800;
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
/* readable text, unique across processes and time: also the segment's name */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static atomic_uint counter;
  if (!id) return ncclInvalidArgument;
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&rnd, sizeof rnd, 1, f) != 1) rnd ^= (uint64_t)(uintptr_t)&rnd * 0x9e3779b97f4a7c15u;
    if (f) fclose(f);
  }
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "fnccl-%ld-%u-%lld%09ld-%016llx", (long)getpid(),
           atomic_fetch_add(&counter, 1), (long long)t.tv_sec, (long)t.tv_nsec, (unsigned long long)rnd);
  return ncclSuccess;
}
static void release(struct ncclComm *c) {
  munmap(c->base, c->size);
  free(c->src);
  free(c);
}
/* the first rank to come makes the segment, the others open it; all wait for all */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
  const char *fake = getenv("FAKE_NCCL_INIT_FAIL");
  if (comm) *comm = NULL;
  if (fake && atoi(fake)) return (ncclResult_t)atoi(fake);
  if (!comm || n < 1 || rank < 0 || rank >= n) return ncclInvalidArgument;
  if (strncmp(id.internal, "fnccl-", 6) || !memchr(id.internal, 0, sizeof id.internal) ||
      strchr(id.internal, '/'))
    return ncclInvalidArgument; /* not from ncclGetUniqueId (a broadcast that did not arrive?) */
  if (n > MAXRANKS) return ncclSystemError;
  char name[136];
  snprintf(name, sizeof name, "/%s", id.internal);
  const size_t size = seg_bytes(n);
  waiter w;
  wait_start(&w);
  int fd, made;
  for (;;) {
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if ((made = fd >= 0) || errno != EEXIST) break;
    if ((fd = shm_open(name, O_RDWR, 0)) >= 0 || errno != ENOENT) break; /* else gone meanwhile: again */
  }
  if (fd < 0) return ncclSystemError;
  ncclResult_t r = made && ftruncate(fd, (off_t)size) ? ncclSystemError : ncclSuccess; /* zero-filled */
  struct stat st;
  while (!r && !made) { /* another rank's segment: wait until it has its size */
    if (fstat(fd, &st)) r = ncclSystemError;
    else if ((size_t)st.st_size == size) break;
    else if (st.st_size) r = ncclInvalidUsage; /* made for another nranks */
    else if (wait_more(&w)) r = ncclSystemError;
  }
  char *base = r ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  struct ncclComm *c = base == MAP_FAILED ? NULL : calloc(1, sizeof *c);
  const char **src = c ? malloc((size_t)n * sizeof *src) : NULL;
  if (!src) {
    if (made) shm_unlink(name);
    if (base != MAP_FAILED) munmap(base, size);
    free(c);
    return r ? r : ncclSystemError;
  }
  *c = (struct ncclComm){.n = n, .me = rank, .base = base, .size = size, .h = (seghdr *)base, .src = src};
  c->rk = (rankctl *)(base + sizeof(seghdr));
  c->mb = (mbox *)(c->rk + n);
  c->slots = base + ctl_bytes(n);
  c->boxes = c->slots + 2 * (size_t)n * SLOT;
  if (atomic_exchange(&c->rk[rank].claimed, 1)) r = ncclInvalidUsage; /* this rank is taken */
  else atomic_fetch_add(&c->h->attached, 1);
  while (!r && atomic_load(&c->h->attached) < n)
    if (wait_more(&w)) {
      shm_unlink(name); /* (a rank that never came) nothing left behind */
      r = ncclSystemError;
    }
  if (r) {
    release(c);
    return r;
  }
  if (rank == 0) shm_unlink(name); /* all attached: the mappings keep it alive */
  *comm = c;
  return ncclSuccess;
}
/* when every rank has come here (as its last operation on c), or gives up; frees c in any case */
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  ncclResult_t r = c->err ? ncclSuccess : barrier(c);
  release(c);
  return r == ncclRemoteError ? ncclSuccess : r; /* a peer aborted: nobody left to wait for */
}
/* now; a peer still waiting on c fails with ncclRemoteError */
ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  atomic_store(&c->h->aborted, 1);
  release(c);
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
  if (!c || !err) return ncclInvalidArgument;
  *err = c->err;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
  if (!c || !count) return ncclInvalidArgument;
  *count = c->n;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
  if (!c || !rank) return ncclInvalidArgument;
  *rank = c->me;
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *d, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)st;
  return coll(ALLREDUCE, s, d, count, dt, op, 0, c);
}
ncclResult_t ncclAllGather(const void *s, void *d, size_t sendcount, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  (void)st;
  return coll(ALLGATHER, s, d, sendcount, dt, ncclSum, 0, c);
}
ncclResult_t ncclReduceScatter(const void *s, void *d, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t st) {
  (void)st;
  return coll(REDUCESCATTER, s, d, recvcount, dt, op, 0, c);
}
ncclResult_t ncclBroadcast(const void *s, void *d, size_t count, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  (void)st;
  return coll(BROADCAST, s, d, count, dt, ncclSum, root, c);
}
static ncclResult_t p2p(int kind, const void *s, void *d, size_t count, int dt, int peer, ncclComm_t c) {
  if (c && (peer < 0 || peer >= c->n)) return refuse(ncclInvalidArgument);
  ncclResult_t r = check(c, dt, ncclSum, count, kind == SEND ? s : d, kind == SEND ? s : d);
  if (r) return r;
  return submit((op_t){.kind = kind, .dt = dt, .peer = peer, .c = c, .s = s, .d = d, .count = count});
}
ncclResult_t ncclSend(const void *s, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)st;
  return p2p(SEND, s, NULL, count, dt, peer, c);
}
ncclResult_t ncclRecv(void *d, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)st;
  return p2p(RECV, NULL, d, count, dt, peer, c);
}
ncclResult_t ncclGroupStart(void) {
  grp.depth++;
  return ncclSuccess;
}
/* the outermost end: the collectives in issue order, then every send and receive together */
ncclResult_t ncclGroupEnd(void) {
  if (!grp.depth) return ncclInvalidUsage;
  if (--grp.depth) return ncclSuccess;
  ncclResult_t r = grp.err;
  for (int i = 0; !r && i < grp.n; i++)
    if (grp.q[i].kind < SEND) r = run_coll(&grp.q[i]);
  if (!r) r = run_p2p(grp.q, grp.n);
  free(grp.q);
  memset(&grp, 0, sizeof grp);
  return r;
}
