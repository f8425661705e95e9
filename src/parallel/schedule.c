/* Pipeline-parallel schedules as data (src/parallel/schedule.h, docs/pipeline.md).
 *
 * Generation follows the published algorithms:
 *  - GPipe: every forward, then every backward, both in micro-batch order.
 *  - 1F1B (PipeDream-Flush, Megatron's forward_backward_pipelining_without_interleaving): stage s
 *    runs w = min(P-s-1, M) warm-up forwards, then M-w pairs (forward w+i, backward i), then the
 *    last w backwards. At most w+1 = min(P-s, M) micro-batches are in flight.
 *  - Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving): the M*V
 *    "virtual micro-batches" of a rank are numbered k = 0..M*V-1; k belongs to group k / (P*V),
 *    runs through chunk (k % (P*V)) / P (backward: V-1 minus that) and is micro-batch
 *    group*P + k % P. Stage s runs w = min((P-s-1)*2 + (V-1)*P, M*V) forwards, then pairs
 *    (forward k+w, backward k), then the remaining backwards.
 *
 * The simulation is list scheduling: each rank runs its list in order, an op starts when its rank
 * is free and the ops it needs have finished (plus p2p when they ran on another rank). A rank
 * blocked on an op of another rank is woken when that op finishes, so the whole run is linear in
 * the number of ops; ranks still blocked when nothing more can run are deadlocked. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"
#include "parallel/schedule.h"
#include "parallel_impl.h"
#include "schedule_internal.h"

struct ts_schedule {
  ts_sched_kind kind;
  int P, M, V;
  int *count;       /* ops of each stage */
  size_t *first;    /* index of each stage's first op in ops */
  size_t total;     /* ops of all stages */
  ts_sched_op *ops; /* the stages' lists one after the other */
};

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved_1f1b"};

int ts_sched_kind_parse(const char *name, ts_sched_kind *out) {
  for (int k = 0; k < 3; k++)
    if (name && strcmp(name, kind_names[k]) == 0) {
      if (out) *out = (ts_sched_kind)k;
      return TS_OK;
    }
  return ts_error_set(TS_ECONFIG, "parallel.pipeline_schedule: '%.64s' is not a schedule (gpipe, 1f1b, interleaved_1f1b)",
                      name ? name : "(none)");
}

const char *ts_sched_kind_name(ts_sched_kind k) {
  return (k >= TS_SCHED_GPIPE && k <= TS_SCHED_INTERLEAVED) ? kind_names[k] : "?";
}

/* ---- creation ---- */

static int sched_alloc(ts_sched_kind kind, int P, int M, int V, const int *counts, ts_schedule **out) {
  ts_schedule *s = calloc(1, sizeof *s);
  if (!s) return ts_error_set(TS_ENOMEM, "pipeline schedule: out of memory");
  s->kind = kind;
  s->P = P;
  s->M = M;
  s->V = V;
  s->count = malloc((size_t)P * sizeof *s->count);
  s->first = malloc((size_t)P * sizeof *s->first);
  if (!s->count || !s->first) {
    ts_schedule_free(s);
    return ts_error_set(TS_ENOMEM, "pipeline schedule: out of memory");
  }
  for (int st = 0; st < P; st++) {
    s->count[st] = counts ? counts[st] : 2 * M * V;
    s->first[st] = s->total;
    s->total += (size_t)s->count[st];
  }
  s->ops = malloc((s->total ? s->total : 1) * sizeof *s->ops);
  if (!s->ops) {
    ts_schedule_free(s);
    return ts_error_set(TS_ENOMEM, "pipeline schedule: out of memory for %zu ops", s->total);
  }
  *out = s;
  return TS_OK;
}

/* Megatron's virtual micro-batch k of phase bwd (interleaved). */
static ts_sched_op virtual_op(int P, int V, int bwd, long k) {
  long in = k % ((long)P * V);
  int chunk = (int)(in / P);
  ts_sched_op o = {bwd, (int)((k / ((long)P * V)) * P + in % P), bwd ? V - 1 - chunk : chunk};
  return o;
}

static void generate_stage(const ts_schedule *s, int st, ts_sched_op *o) {
  int P = s->P, M = s->M, V = s->V, n = 0;
  if (s->kind == TS_SCHED_GPIPE) {
    for (int m = 0; m < M; m++) o[n++] = (ts_sched_op){0, m, 0};
    for (int m = 0; m < M; m++) o[n++] = (ts_sched_op){1, m, 0};
  } else if (s->kind == TS_SCHED_1F1B) {
    int w = P - st - 1 < M ? P - st - 1 : M, rest = M - w;
    for (int m = 0; m < w; m++) o[n++] = (ts_sched_op){0, m, 0};
    for (int i = 0; i < rest; i++) {
      o[n++] = (ts_sched_op){0, w + i, 0};
      o[n++] = (ts_sched_op){1, i, 0};
    }
    for (int m = rest; m < M; m++) o[n++] = (ts_sched_op){1, m, 0};
  } else {
    long total = (long)M * V, w = (long)(P - st - 1) * 2 + (long)(V - 1) * P;
    if (w > total) w = total;
    long rest = total - w;
    for (long k = 0; k < w; k++) o[n++] = virtual_op(P, V, 0, k);
    for (long k = 0; k < rest; k++) {
      o[n++] = virtual_op(P, V, 0, k + w);
      o[n++] = virtual_op(P, V, 1, k);
    }
    for (long k = rest; k < total; k++) o[n++] = virtual_op(P, V, 1, k);
  }
}

int ts_schedule_create(ts_sched_kind kind, int P, int M, int V, ts_schedule **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_schedule_create: out is NULL");
  *out = NULL;
  if (kind < TS_SCHED_GPIPE || kind > TS_SCHED_INTERLEAVED)
    return ts_error_set(TS_EINVAL, "ts_schedule_create: unknown schedule kind %d", (int)kind);
  const char *kn = kind_names[kind];
  if (P < 1 || P > TS_SCHED_MAX_STAGES)
    return ts_error_set(TS_ECONFIG, "parallel.pipeline_stages: %d stages; must be in 1..%d", P, TS_SCHED_MAX_STAGES);
  if (M < 1 || M > TS_SCHED_MAX_MICRO)
    return ts_error_set(TS_ECONFIG, "parallel.micro_batches: %d micro-batches; must be in 1..%d", M, TS_SCHED_MAX_MICRO);
  if (V < 1 || V > TS_SCHED_MAX_VIRTUAL)
    return ts_error_set(TS_ECONFIG, "parallel.virtual_stages: %d virtual stages; must be in 1..%d", V,
                        TS_SCHED_MAX_VIRTUAL);
  if (V > 1 && kind != TS_SCHED_INTERLEAVED)
    return ts_error_set(TS_ECONFIG,
                        "parallel.virtual_stages: %d virtual stages need parallel.pipeline_schedule "
                        "interleaved_1f1b (%s runs one stage per rank: set 1)",
                        V, kn);
  if (kind == TS_SCHED_INTERLEAVED && M % P != 0)
    return ts_error_set(TS_ECONFIG,
                        "parallel.micro_batches: %d is not a multiple of parallel.pipeline_stages %d, which "
                        "interleaved_1f1b needs (micro-batches run through the chunks in groups of %d)",
                        M, P, P);
  if ((int64_t)P * M * V > TS_SCHED_MAX_WORK)
    return ts_error_set(TS_ECONFIG,
                        "parallel.micro_batches: %d micro-batches x parallel.pipeline_stages %d x "
                        "parallel.virtual_stages %d = %lld exceeds %d (a schedule of that size is not a job)",
                        M, P, V, (long long)P * M * V, TS_SCHED_MAX_WORK);
  ts_schedule *s;
  int rc = sched_alloc(kind, P, M, V, NULL, &s);
  if (rc) return rc;
  for (int st = 0; st < P; st++) generate_stage(s, st, s->ops + s->first[st]);
  *out = s;
  return TS_OK;
}

int ts__schedule_from_lists(ts_sched_kind kind, int P, int M, int V, const ts_sched_op *const *lists,
                            const int *counts, ts_schedule **out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts__schedule_from_lists: out is NULL");
  *out = NULL;
  if (P < 1 || M < 1 || V < 1 || !lists || !counts)
    return ts_error_set(TS_EINVAL, "ts__schedule_from_lists: P=%d, M=%d, V=%d must be >= 1 and the lists given", P,
                        M, V);
  for (int st = 0; st < P; st++)
    if (counts[st] < 0 || (counts[st] > 0 && !lists[st]))
      return ts_error_set(TS_EINVAL, "ts__schedule_from_lists: stage %d: %d ops and no list", st, counts[st]);
  ts_schedule *s;
  int rc = sched_alloc(kind, P, M, V, counts, &s);
  if (rc) return rc;
  for (int st = 0; st < P; st++)
    if (counts[st]) memcpy(s->ops + s->first[st], lists[st], (size_t)counts[st] * sizeof *s->ops);
  *out = s;
  return TS_OK;
}

void ts_schedule_free(ts_schedule *s) {
  if (!s) return;
  free(s->count);
  free(s->first);
  free(s->ops);
  free(s);
}

int ts_schedule_stages(const ts_schedule *s) { return s ? s->P : 0; }
int ts_schedule_micro(const ts_schedule *s) { return s ? s->M : 0; }
int ts_schedule_virtual(const ts_schedule *s) { return s ? s->V : 0; }
ts_sched_kind ts_schedule_kind(const ts_schedule *s) { return s ? s->kind : TS_SCHED_GPIPE; }

int ts_schedule_ops(const ts_schedule *s, int stage, const ts_sched_op **ops) {
  if (ops) *ops = NULL;
  if (!s || !ops) return ts_error_set(TS_EINVAL, "ts_schedule_ops: NULL argument");
  if (stage < 0 || stage >= s->P)
    return ts_error_set(TS_EINVAL, "ts_schedule_ops: stage %d is out of 0..%d", stage, s->P - 1);
  *ops = s->ops + s->first[stage];
  return s->count[stage];
}

int ts_schedule_max_inflight(const ts_schedule *s, int stage, int chunk) {
  if (!s) return ts_error_set(TS_EINVAL, "ts_schedule_max_inflight: NULL schedule");
  if (stage < 0 || stage >= s->P || chunk < 0 || chunk >= s->V)
    return ts_error_set(TS_EINVAL, "ts_schedule_max_inflight: stage %d / chunk %d is out of 0..%d / 0..%d", stage,
                        chunk, s->P - 1, s->V - 1);
  const ts_sched_op *o = s->ops + s->first[stage];
  int cur = 0, best = 0;
  for (int i = 0; i < s->count[stage]; i++) {
    if (o[i].chunk != chunk) continue;
    cur += o[i].bwd ? -1 : 1;
    if (cur > best) best = cur;
  }
  return best;
}

/* ---- validity ---- */

static const char *op_str(char *b, size_t cap, ts_sched_op o) {
  snprintf(b, cap, "%s of micro-batch %d, chunk %d", o.bwd == 1 ? "backward" : o.bwd == 0 ? "forward" : "phase ?",
           o.micro, o.chunk);
  return b;
}

#define SCHED_FMT "pipeline schedule (%s, %d stages, %d micro-batches, %d virtual): "
#define SCHED_ARGS(s) ts_sched_kind_name((s)->kind), (s)->P, (s)->M, (s)->V

/* Every op in range and exactly once per stage, micro-batches increasing per (phase, chunk). */
static int check_lists(const ts_schedule *s) {
  size_t lanes = 2 * (size_t)s->V, slots = lanes * (size_t)s->M;
  int *seen = malloc(slots * sizeof *seen), *last = malloc(lanes * 2 * sizeof *last);
  if (!seen || !last) {
    free(seen);
    free(last);
    return ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory", SCHED_ARGS(s));
  }
  int rc = TS_OK;
  char b[96];
  for (int st = 0; st < s->P && !rc; st++) {
    const ts_sched_op *o = s->ops + s->first[st];
    for (size_t j = 0; j < slots; j++) seen[j] = -1;
    for (size_t j = 0; j < 2 * lanes; j++) last[j] = -1; /* [lane*2]: micro, [lane*2+1]: op */
    for (int i = 0; i < s->count[st] && !rc; i++) {
      ts_sched_op x = o[i];
      if (x.bwd != 0 && x.bwd != 1)
        rc = ts_error_set(TS_EINVAL, SCHED_FMT "stage %d op %d: phase %d is neither forward (0) nor backward (1)",
                          SCHED_ARGS(s), st, i, x.bwd);
      else if (x.micro < 0 || x.micro >= s->M)
        rc = ts_error_set(TS_EINVAL, SCHED_FMT "stage %d op %d (%s): micro-batch out of 0..%d", SCHED_ARGS(s), st, i,
                          op_str(b, sizeof b, x), s->M - 1);
      else if (x.chunk < 0 || x.chunk >= s->V)
        rc = ts_error_set(TS_EINVAL, SCHED_FMT "stage %d op %d (%s): chunk out of 0..%d", SCHED_ARGS(s), st, i,
                          op_str(b, sizeof b, x), s->V - 1);
      if (rc) break;
      size_t lane = (size_t)x.bwd * s->V + (size_t)x.chunk, slot = lane * s->M + (size_t)x.micro;
      if (seen[slot] >= 0)
        rc = ts_error_set(TS_EINVAL, SCHED_FMT "stage %d op %d (%s): listed twice (also op %d)", SCHED_ARGS(s), st, i,
                          op_str(b, sizeof b, x), seen[slot]);
      else if (last[2 * lane] > x.micro)
        rc = ts_error_set(TS_EINVAL,
                          SCHED_FMT "stage %d op %d (%s): comes after micro-batch %d (op %d); the micro-batches of "
                                    "one phase and chunk must run in increasing order (p2p messages of an edge "
                                    "match in FIFO order)",
                          SCHED_ARGS(s), st, i, op_str(b, sizeof b, x), last[2 * lane], last[2 * lane + 1]);
      seen[slot] = i;
      last[2 * lane] = x.micro;
      last[2 * lane + 1] = i;
    }
    for (size_t j = 0; j < slots && !rc; j++)
      if (seen[j] < 0) {
        ts_sched_op x = {(int)(j / s->M >= (size_t)s->V), (int)(j % s->M), (int)(j / s->M % s->V)};
        rc = ts_error_set(TS_EINVAL, SCHED_FMT "stage %d: %s is missing (%d ops listed, a step has %zu)", SCHED_ARGS(s),
                          st, op_str(b, sizeof b, x), s->count[st], slots);
      }
  }
  free(seen);
  free(last);
  return rc;
}

/* ---- simulation ---- */

typedef struct {
  const ts_schedule *s;
  const double *fwd, *bwd; /* per piece */
  double p2p;
  int NP;                  /* pieces */
  double *done_f, *done_b; /* finish time per (micro, piece), -1 until it ran */
  double *t;               /* per stage: when it is free */
  int *pos;                /* per stage: next op */
  int *queue, *queued, qn; /* stages to try again */
  double *start, *finish;  /* per op (index first[st] + i), optional */
} sim_t;

static void wake(sim_t *z, int st) {
  if (z->queued[st]) return;
  z->queued[st] = 1;
  z->queue[z->qn++] = st;
}

/* The time op o of stage st may start, or -1 if something it needs has not run. */
static double ready_at(const sim_t *z, int st, ts_sched_op o) {
  int P = z->s->P, k = o.chunk * P + st;
  size_t at = (size_t)o.micro * z->NP + (size_t)k;
  double r = z->t[st], d;
  if (!o.bwd) {
    if (k > 0) {
      if ((d = z->done_f[at - 1]) < 0) return -1;
      d += (k - 1) % P != st ? z->p2p : 0;
      if (d > r) r = d;
    }
  } else {
    if ((d = z->done_f[at]) < 0) return -1;
    if (d > r) r = d;
    if (k < z->NP - 1) {
      if ((d = z->done_b[at + 1]) < 0) return -1;
      d += (k + 1) % P != st ? z->p2p : 0;
      if (d > r) r = d;
    }
  }
  return r;
}

static void advance(sim_t *z, int st) {
  const ts_schedule *s = z->s;
  const ts_sched_op *o = s->ops + s->first[st];
  int P = s->P;
  while (z->pos[st] < s->count[st]) {
    ts_sched_op x = o[z->pos[st]];
    double r = ready_at(z, st, x);
    if (r < 0) return;
    int k = x.chunk * P + st;
    size_t at = (size_t)x.micro * z->NP + (size_t)k, idx = s->first[st] + (size_t)z->pos[st];
    double end = r + (x.bwd ? z->bwd[k] : z->fwd[k]);
    if (z->start) z->start[idx] = r;
    if (z->finish) z->finish[idx] = end;
    z->t[st] = end;
    z->pos[st]++;
    if (!x.bwd) {
      z->done_f[at] = end;
      if (k + 1 < z->NP && (k + 1) % P != st) wake(z, (k + 1) % P);
    } else {
      z->done_b[at] = end;
      if (k > 0 && (k - 1) % P != st) wake(z, (k - 1) % P);
    }
  }
}

/* Explains a deadlock: where each stuck stage waits and for what. */
static int deadlock(const sim_t *z) {
  const ts_schedule *s = z->s;
  char msg[900], b[96];
  size_t n = 0;
  int shown = 0, stuck = 0, P = s->P;
  for (int st = 0; st < P; st++) {
    if (z->pos[st] >= s->count[st]) continue;
    if (stuck++ >= 4) continue;
    ts_sched_op x = s->ops[s->first[st] + (size_t)z->pos[st]];
    int k = x.chunk * P + st;
    size_t at = (size_t)x.micro * z->NP + (size_t)k;
    const char *what = "backward";
    int piece = k + 1;
    if (!x.bwd) {
      what = "forward";
      piece = k - 1;
    } else if (z->done_f[at] < 0) {
      what = "forward";
      piece = k;
    }
    ts__app(msg, sizeof msg, &n, "%sstage %d waits at op %d (%s) for the %s of micro-batch %d through piece %d (stage %d)",
            shown++ ? "; " : "", st, z->pos[st], op_str(b, sizeof b, x), what, x.micro, piece, piece % P);
  }
  if (stuck > shown) ts__app(msg, sizeof msg, &n, "; and %d more stuck stages", stuck - shown);
  return ts_error_set(TS_EINVAL, SCHED_FMT "deadlock: %s", SCHED_ARGS(s), msg);
}

/* Checks the lists, then runs them; start/finish (NULL or one entry per op) get each op's times. */
static int run_sim(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, double *start,
                   double *finish) {
  int rc = check_lists(s);
  if (rc) return rc;
  sim_t z = {.s = s, .fwd = fwd, .bwd = bwd, .p2p = p2p, .NP = s->P * s->V, .start = start, .finish = finish};
  size_t slots = (size_t)s->M * (size_t)z.NP;
  z.done_f = malloc(slots * sizeof *z.done_f);
  z.done_b = malloc(slots * sizeof *z.done_b);
  z.t = calloc((size_t)s->P, sizeof *z.t);
  z.pos = calloc((size_t)s->P, sizeof *z.pos);
  z.queue = malloc((size_t)s->P * sizeof *z.queue);
  z.queued = calloc((size_t)s->P, sizeof *z.queued);
  if (!z.done_f || !z.done_b || !z.t || !z.pos || !z.queue || !z.queued) {
    rc = ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory for the simulation", SCHED_ARGS(s));
    goto out;
  }
  for (size_t j = 0; j < slots; j++) z.done_f[j] = z.done_b[j] = -1;
  for (int st = s->P - 1; st >= 0; st--) wake(&z, st);
  while (z.qn > 0) {
    int st = z.queue[--z.qn];
    z.queued[st] = 0;
    advance(&z, st);
  }
  for (int st = 0; st < s->P && !rc; st++)
    if (z.pos[st] < s->count[st]) rc = deadlock(&z);
out:
  free(z.done_f);
  free(z.done_b);
  free(z.t);
  free(z.pos);
  free(z.queue);
  free(z.queued);
  return rc;
}

int ts_schedule_check(const ts_schedule *s) {
  if (!s) return ts_error_set(TS_EINVAL, "ts_schedule_check: NULL schedule");
  int NP = s->P * s->V;
  double *c = malloc(2 * (size_t)NP * sizeof *c);
  if (!c) return ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory", SCHED_ARGS(s));
  for (int k = 0; k < NP; k++) c[k] = 1, c[NP + k] = 2;
  int rc = run_sim(s, c, c + NP, 0, NULL, NULL);
  free(c);
  return rc;
}

/* Costs per piece (defaults for NULL), checked; *buf holds what must be freed. */
static int sim_costs(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, const double **f,
                     const double **b, double **buf) {
  int NP = s->P * s->V;
  *buf = NULL;
  if (!isfinite(p2p) || p2p < 0) return ts_error_set(TS_EINVAL, SCHED_FMT "p2p time %g must be finite and >= 0", SCHED_ARGS(s), p2p);
  for (int k = 0; k < NP; k++)
    if ((fwd && (!isfinite(fwd[k]) || fwd[k] < 0)) || (bwd && (!isfinite(bwd[k]) || bwd[k] < 0)))
      return ts_error_set(TS_EINVAL, SCHED_FMT "the cost of piece %d (forward %g, backward %g) must be finite and >= 0",
                          SCHED_ARGS(s), k, fwd ? fwd[k] : 1.0, bwd ? bwd[k] : 2.0);
  if (!fwd || !bwd) {
    double *c = malloc(2 * (size_t)NP * sizeof *c);
    if (!c) return ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory", SCHED_ARGS(s));
    for (int k = 0; k < NP; k++) c[k] = fwd ? fwd[k] : 1, c[NP + k] = bwd ? bwd[k] : 2;
    *buf = c;
    fwd = c;
    bwd = c + NP;
  }
  *f = fwd;
  *b = bwd;
  return TS_OK;
}

/* Busy time of every stage: the sum of its ops' costs. */
static double stage_busy(const ts_schedule *s, int st, const double *f, const double *b) {
  const ts_sched_op *o = s->ops + s->first[st];
  double busy = 0;
  for (int i = 0; i < s->count[st]; i++) {
    int k = o[i].chunk * s->P + st;
    busy += o[i].bwd ? b[k] : f[k];
  }
  return busy;
}

/* The simulation with the caller's costs: *times (allocated, the caller frees it) holds every
 * op's start then every op's end; res the summary; *busy (stage >= 0) that stage's busy time. */
static int simulate_all(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, double **times,
                        ts_sched_sim *res, int stage, double *busy) {
  const double *f = NULL, *b = NULL;
  double *costs = NULL, *tm = malloc(2 * (s->total ? s->total : 1) * sizeof *tm);
  *times = NULL;
  memset(res, 0, sizeof *res);
  if (!tm) return ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory for the simulation", SCHED_ARGS(s));
  int rc = sim_costs(s, fwd, bwd, p2p, &f, &b, &costs);
  if (!rc) rc = run_sim(s, f, b, p2p, tm, tm + s->total);
  if (!rc) {
    double ms = 0, sum = 0;
    for (size_t j = 0; j < s->total; j++)
      if (tm[s->total + j] > ms) ms = tm[s->total + j];
    res->makespan = ms;
    for (int st = 0; st < s->P; st++) {
      double bz = stage_busy(s, st, f, b);
      sum += bz;
      if (bz > res->busy_max) res->busy_max = bz;
      if (ms - bz > res->idle_max) res->idle_max = ms - bz;
      if (st == stage) *busy = bz;
    }
    res->bubble = ms > 0 ? 1 - sum / (s->P * ms) : 0;
  }
  free(costs);
  if (rc) free(tm);
  else *times = tm;
  return rc;
}

int ts_schedule_simulate(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, ts_sched_sim *out) {
  if (!s || !out) return ts_error_set(TS_EINVAL, "ts_schedule_simulate: NULL argument");
  double *tm;
  int rc = simulate_all(s, fwd, bwd, p2p, &tm, out, -1, NULL);
  free(tm);
  return rc;
}

int ts_schedule_simulate_stage(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, int stage,
                               double *start, double *end, double *busy, double *idle) {
  if (!s) return ts_error_set(TS_EINVAL, "ts_schedule_simulate_stage: NULL schedule");
  if (stage < 0 || stage >= s->P)
    return ts_error_set(TS_EINVAL, "ts_schedule_simulate_stage: stage %d is out of 0..%d", stage, s->P - 1);
  double *tm, bz = 0;
  ts_sched_sim res;
  int rc = simulate_all(s, fwd, bwd, p2p, &tm, &res, stage, &bz);
  if (rc) return rc;
  size_t at = s->first[stage], n = (size_t)s->count[stage];
  if (start) memcpy(start, tm + at, n * sizeof *start);
  if (end) memcpy(end, tm + s->total + at, n * sizeof *end);
  if (busy) *busy = bz;
  if (idle) *idle = res.makespan - bz;
  free(tm);
  return TS_OK;
}

double ts_schedule_bubble_formula(ts_sched_kind kind, int P, int M, int V) {
  if (P < 1 || M < 1 || V < 1 || kind < TS_SCHED_GPIPE || kind > TS_SCHED_INTERLEAVED) return NAN;
  if (kind != TS_SCHED_INTERLEAVED) V = 1;
  return (double)(P - 1) / ((double)V * M + P - 1);
}

/* ---- drawing ---- */

static int op_label(char *b, size_t cap, ts_sched_op o, int V) {
  char c = o.bwd ? 'B' : 'F';
  if (V == 1) return snprintf(b, cap, "%c%d", c, o.micro);
  if (V <= 26) return snprintf(b, cap, "%c%d%c", c, o.micro, 'a' + o.chunk);
  return snprintf(b, cap, "%c%dc%d", c, o.micro, o.chunk);
}

int ts_schedule_draw(const ts_schedule *s, FILE *out, int max_cols) {
  if (!s || !out) return ts_error_set(TS_EINVAL, "ts_schedule_draw: NULL argument");
  if (max_cols < 0 || (max_cols > 0 && max_cols < 24))
    return ts_error_set(TS_EINVAL, "ts_schedule_draw: max_cols %d must be 0 (no limit) or at least 24", max_cols);
  double *tm;
  ts_sched_sim sim;
  int rc = simulate_all(s, NULL, NULL, 0, &tm, &sim, -1, NULL);
  if (rc) return rc;
  /* one time unit = u columns: the longest forward label and a space */
  char lab[48];
  int u = 2;
  for (size_t j = 0; j < s->total; j++) {
    int n = op_label(lab, sizeof lab, s->ops[j], s->V) + 1;
    if (!s->ops[j].bwd && n > u) u = n;
  }
  long units = lround(sim.makespan);
  int pw = snprintf(lab, sizeof lab, "%d", s->P - 1);
  int prefix = (int)strlen("stage ") + pw + 1;
  size_t full = (size_t)prefix + (size_t)units * (size_t)u;
  size_t width = max_cols > 0 && full > (size_t)max_cols ? (size_t)max_cols : full;
  char *row = malloc(width + 1);
  if (!row) {
    free(tm);
    return ts_error_set(TS_ENOMEM, SCHED_FMT "out of memory for drawing", SCHED_ARGS(s));
  }
  fprintf(out, "%s: %d stages, %d micro-batches", ts_sched_kind_name(s->kind), s->P, s->M);
  if (s->V > 1) fprintf(out, ", %d virtual stages", s->V);
  fprintf(out, "; makespan %ld (forward 1, backward 2), bubble %.3f (formula %.3f)\n", units, sim.bubble,
          ts_schedule_bubble_formula(s->kind, s->P, s->M, s->V));
  for (int st = 0; st < s->P; st++) {
    size_t body = width - (size_t)prefix; /* width >= 24 > prefix */
    snprintf(row, width + 1, "stage %*d ", pw, st);
    memset(row + prefix, '.', body);
    for (int i = 0; i < s->count[st]; i++) {
      size_t j = s->first[st] + (size_t)i;
      size_t c0 = (size_t)lround(tm[j]) * (size_t)u, c1 = (size_t)lround(tm[s->total + j]) * (size_t)u;
      if (c0 >= body) break; /* ops of one stage run in increasing time */
      int n = op_label(lab, sizeof lab, s->ops[j], s->V);
      for (size_t c = c0; c < c1 && c < body; c++) row[prefix + c] = c - c0 < (size_t)n ? lab[c - c0] : ' ';
    }
    size_t len = width;
    if (width < full) {
      memcpy(row + width - 3, "...", 3);
    } else {
      while (len > (size_t)prefix && row[len - 1] == ' ') len--;
    }
    row[len] = 0;
    fprintf(out, "%s\n", row);
  }
  if (s->V == 1)
    fprintf(out, "legend: Fm / Bm forward / backward of micro-batch m, one time unit = %d columns, '.' idle\n", u);
  else if (s->V <= 26)
    fprintf(out,
            "legend: Fmc / Bmc forward / backward of micro-batch m through chunk c (a = 0, b = 1, ...; stage s, "
            "chunk c runs piece c*%d + s), one time unit = %d columns, '.' idle\n",
            s->P, u);
  else
    fprintf(out,
            "legend: FmcC / BmcC forward / backward of micro-batch m through chunk C (stage s, chunk C runs piece "
            "C*%d + s), one time unit = %d columns, '.' idle\n",
            s->P, u);
  free(row);
  free(tm);
  if (ferror(out)) return ts_error_set(TS_EIO, "ts_schedule_draw: writing the drawing failed");
  return TS_OK;
}
