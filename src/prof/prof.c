/* The profiler: per-thread rings of timed events (lock-free, preallocated), aggregation by event
 * name at each step's end, the step breakdown, and the summary report (text and JSON). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "prof_impl.h"

/* ---- text buffer ---- */
/* ---- lifetime ---- */
static _Atomic uint64_t g_gen = 1;

/* The rings a thread has claimed, by profiler generation (a thread may record into a few). */
#define TLS_SLOTS 4
static _Thread_local struct {
  uint64_t gen;
  ts__prof_ring *r;
} tls_ring[TLS_SLOTS];

static uint64_t pow2_at_least(uint64_t n) {
  uint64_t c = 1;
  while (c < n) c <<= 1;
  return c;
}

ts_prof_config ts_prof_config_default(void) {
  ts_prof_config c;
  memset(&c, 0, sizeof c);
  c.mode = TS_PROF_OFF;
  return c;
}

static ts__prof_ring *claim(ts_prof *p) {
  int k = atomic_fetch_add(&p->nrings, 1);
  if (k >= p->cfg.max_threads) {
    atomic_fetch_sub(&p->nrings, 1);
    return NULL;
  }
  ts__prof_ring *r = &p->rings[k];
  uint64_t cap = pow2_at_least((uint64_t)p->cfg.ring_events);
  r->ev = malloc(sizeof *r->ev * cap);
  if (!r->ev) return NULL; /* the slot stays unready: its events are counted as dropped */
  r->mask = cap - 1;
  r->tid = k;
  atomic_store_explicit(&r->ready, 1, memory_order_release);
  int slot = 0;
  for (int i = 0; i < TLS_SLOTS; i++)
    if (tls_ring[i].gen == 0 || tls_ring[i].gen < tls_ring[slot].gen) slot = i; /* free, else oldest */
  tls_ring[slot].gen = p->gen;
  tls_ring[slot].r = r;
  return r;
}

static inline ts__prof_ring *my_ring(const ts_prof *p) {
  for (int i = 0; i < TLS_SLOTS; i++)
    if (tls_ring[i].gen == p->gen) return tls_ring[i].r;
  return NULL;
}

int ts_prof_create(const ts_prof_config *cfg, int rank, ts_prof **out) {
  *out = NULL;
  if (!cfg || cfg->mode < TS_PROF_OFF || cfg->mode > TS_PROF_TRACE)
    return ts_error_set(TS_EINVAL, "ts_prof_create: mode must be off, summary or trace");
  if (cfg->ring_events < 0 || cfg->max_threads < 0 || cfg->max_names < 0)
    return ts_error_set(TS_EINVAL, "ts_prof_create: negative ring_events, max_threads or max_names");
  ts_prof *p = calloc(1, sizeof *p);
  if (!p) return ts_error_set(TS_ENOMEM, "profiler: out of memory");
  p->cfg = *cfg;
  if (!p->cfg.ring_events) p->cfg.ring_events = cfg->mode == TS_PROF_TRACE ? 262144 : 16384;
  if (!p->cfg.max_threads) p->cfg.max_threads = 8;
  if (!p->cfg.max_names) p->cfg.max_names = 4096;
  p->rank = rank;
  p->gen = atomic_fetch_add(&g_gen, 1);
  p->tab_cap = (size_t)pow2_at_least(2 * (uint64_t)p->cfg.max_names);
  p->rings = calloc((size_t)p->cfg.max_threads, sizeof *p->rings);
  p->tab = calloc(p->tab_cap, sizeof *p->tab);
  p->origin = ts_time_now();
  p->first_step = -1;
  if (!p->rings || !p->tab || !claim(p)) {
    ts_prof_free(p);
    return ts_error_set(TS_ENOMEM, "profiler: cannot allocate its ring of %d events", cfg->ring_events);
  }
  *out = p;
  return TS_OK;
}

void ts_prof_free(ts_prof *p) {
  if (!p) return;
  for (int i = 0; p->rings && i < p->cfg.max_threads; i++) free(p->rings[i].ev);
  for (int i = 0; i < TLS_SLOTS; i++)
    if (tls_ring[i].gen == p->gen) tls_ring[i].gen = 0;
  free(p->rings);
  free(p->tab);
  free(p);
}

ts_prof_mode ts_prof_get_mode(const ts_prof *p) { return p ? p->cfg.mode : TS_PROF_OFF; }
void ts_prof_set_origin(ts_prof *p, double t) { p->origin = t; }
void ts_prof_set_active(ts_prof *p, int on) { atomic_store(&p->active, on ? 1 : 0); }
int ts_prof_active(const ts_prof *p) { return p && atomic_load_explicit(&p->active, memory_order_relaxed); }

int ts_prof_attach_thread(ts_prof *p) {
  if (my_ring(p)) return TS_OK;
  if (!claim(p))
    return ts_error_set(TS_ERANGE, "profiler: at most %d recording threads", p->cfg.max_threads);
  return TS_OK;
}

void ts_prof_record(ts_prof *p, const ts_prof_event *e) {
  if (!p || !atomic_load_explicit(&p->active, memory_order_relaxed)) return;
  ts__prof_ring *r = my_ring(p);
  if (!r && !(r = claim(p))) {
    atomic_fetch_add_explicit(&p->dropped_extra, 1, memory_order_relaxed);
    return;
  }
  uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  ts_prof_event *d = &r->ev[h & r->mask];
  *d = *e;
  d->step = p->cur_step;
  d->tid = r->tid;
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/* ---- aggregation ---- */
static ts__prof_agg *lookup(ts_prof *p, const ts_prof_event *e) {
  size_t m = p->tab_cap - 1, h = (size_t)(((uintptr_t)e->name * 0x9E3779B97F4A7C15ull) >> 17) & m;
  for (;; h = (h + 1) & m) {
    ts__prof_agg *a = &p->tab[h];
    if (a->name == e->name) return a;
    if (!a->name) {
      if (p->tab_n >= p->cfg.max_names) return NULL;
      p->tab_n++;
      a->name = e->name;
      a->cat = e->cat;
      a->kind = e->kind;
      a->phase = e->phase;
      a->coll = e->coll;
      return a;
    }
  }
}

static void aggregate(ts_prof *p, const ts_prof_event *e) {
  double dt = e->t1 - e->t0;
  if (e->name) {
    ts__prof_agg *a = lookup(p, e);
    if (!a) {
      atomic_fetch_add_explicit(&p->dropped_extra, 1, memory_order_relaxed);
    } else {
      a->calls++;
      a->total_s += dt;
      a->flops += e->flops;
      if (e->low) a->low_flops += e->flops;
      a->bytes += (double)e->bytes;
      if (e->group > a->group) a->group = e->group;
    }
  }
  if (!p->in_step || e->step != p->cur_step) return;
  double ms = 1e3 * dt;
  switch (e->kind) {
    case TS_PROF_DATA: p->cur.data_ms += ms; break;
    case TS_PROF_FORWARD: p->cur.forward_ms += ms; break;
    case TS_PROF_BACKWARD: p->cur.backward_ms += ms; break;
    case TS_PROF_COMM: p->cur.comm_ms += ms; break;
    case TS_PROF_OPTIMIZER: p->cur.optimizer_ms += ms; break;
    default: break;
  }
}

/* Aggregates every ring's events written since the last drain. */
static void drain(ts_prof *p) {
  int n = atomic_load(&p->nrings);
  for (int k = 0; k < n && k < p->cfg.max_threads; k++) {
    ts__prof_ring *r = &p->rings[k];
    if (!atomic_load_explicit(&r->ready, memory_order_acquire)) continue;
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire), cap = r->mask + 1;
    uint64_t from = r->agg;
    if (h - from > cap) {
      p->lost_agg += (int64_t)(h - cap - from);
      from = h - cap;
    }
    for (uint64_t i = from; i < h; i++) aggregate(p, &r->ev[i & r->mask]);
    r->agg = h;
  }
}

void ts_prof_step_begin(ts_prof *p, int64_t step, double t) {
  if (!ts_prof_active(p)) return;
  drain(p); /* events between steps (evaluation, checkpoints) belong to no step */
  p->cur_step = step;
  p->step_t0 = t;
  p->in_step = 1;
  memset(&p->cur, 0, sizeof p->cur);
}

void ts_prof_step_end(ts_prof *p, double t, ts_prof_breakdown *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!ts_prof_active(p) || !p->in_step) return;
  ts_prof_event e;
  memset(&e, 0, sizeof e);
  e.name = "step";
  e.cat = "step";
  e.kind = TS_PROF_STEP;
  e.t0 = p->step_t0;
  e.t1 = t;
  ts_prof_record(p, &e);
  drain(p);
  ts_prof_breakdown *c = &p->cur;
  c->total_ms = 1e3 * (t - p->step_t0);
  c->other_ms = c->total_ms - c->data_ms - c->forward_ms - c->backward_ms - c->comm_ms - c->optimizer_ms;
  c->steps = 1;
  p->sum.total_ms += c->total_ms;
  p->sum.data_ms += c->data_ms;
  p->sum.forward_ms += c->forward_ms;
  p->sum.backward_ms += c->backward_ms;
  p->sum.comm_ms += c->comm_ms;
  p->sum.optimizer_ms += c->optimizer_ms;
  p->sum.other_ms += c->other_ms;
  p->nsteps++;
  if (p->first_step < 0) p->first_step = p->cur_step;
  p->last_step = p->cur_step;
  p->in_step = 0;
  if (out) *out = *c;
}

void ts_prof_mean_breakdown(const ts_prof *p, ts_prof_breakdown *out) {
  memset(out, 0, sizeof *out);
  if (!p || !p->nsteps) return;
  double n = (double)p->nsteps;
  out->total_ms = p->sum.total_ms / n;
  out->data_ms = p->sum.data_ms / n;
  out->forward_ms = p->sum.forward_ms / n;
  out->backward_ms = p->sum.backward_ms / n;
  out->comm_ms = p->sum.comm_ms / n;
  out->optimizer_ms = p->sum.optimizer_ms / n;
  out->other_ms = p->sum.other_ms / n;
  out->steps = n;
}

int64_t ts_prof_recorded(const ts_prof *p) {
  int64_t n = 0;
  for (int k = 0; p && k < atomic_load(&p->nrings) && k < p->cfg.max_threads; k++)
    n += (int64_t)atomic_load(&p->rings[k].head);
  return n;
}

int64_t ts_prof_dropped(const ts_prof *p) {
  if (!p) return 0;
  int64_t d = atomic_load(&p->dropped_extra);
  if (p->cfg.mode != TS_PROF_TRACE) return d + p->lost_agg;
  for (int k = 0; k < atomic_load(&p->nrings) && k < p->cfg.max_threads; k++) { /* gone from the trace */
    uint64_t h = atomic_load(&p->rings[k].head), cap = p->rings[k].mask + 1;
    if (p->rings[k].ev && h > cap) d += (int64_t)(h - cap);
  }
  return d;
}

/* ---- the report ---- */
typedef ts__prof_agg row; /* one table row: an aggregate by op type or by operator */

static int by_total(const void *a, const void *b) {
  double x = ((const row *)a)->total_s, y = ((const row *)b)->total_s;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Rows of table entries of kind `kind` merged by key (the category when by_cat, else the name
 * and category: the same operator in two graphs is one row), sorted by total time. */
static int rows_of(const ts_prof *p, int kind, int coll_only, int by_cat, row **out) {
  row *r = calloc((size_t)p->tab_n + 1, sizeof *r);
  if (!r) return -1;
  int n = 0;
  for (size_t i = 0; i < p->tab_cap; i++) {
    const ts__prof_agg *a = &p->tab[i];
    if (!a->name || a->kind != kind || (coll_only && !a->coll)) continue;
    const char *key = by_cat ? a->cat : a->name;
    int j = 0;
    for (; j < n; j++)
      if (!strcmp(by_cat ? r[j].cat : r[j].name, key ? key : "") && (by_cat || !strcmp(r[j].cat, a->cat ? a->cat : "")))
        break;
    if (j == n) {
      r[n].name = by_cat ? a->cat : a->name;
      r[n].cat = a->cat ? a->cat : "";
      if (!r[n].name) r[n].name = "";
      r[n].kind = a->kind;
      r[n].phase = a->phase;
      r[n].coll = a->coll;
      n++;
    }
    r[j].calls += a->calls;
    r[j].total_s += a->total_s;
    r[j].flops += a->flops;
    r[j].low_flops += a->low_flops;
    r[j].bytes += a->bytes;
    if (a->group > r[j].group) r[j].group = a->group;
  }
  qsort(r, (size_t)n, sizeof *r, by_total);
  *out = r;
  return n;
}

static double median(const double *x, int n) {
  double *s = malloc(sizeof *s * (size_t)n);
  if (!s) return x[0];
  memcpy(s, x, sizeof *s * (size_t)n);
  for (int i = 1; i < n; i++) /* insertion sort: a few ranks */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      double t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

int ts_prof_straggler(const ts_prof_breakdown *ranks, int n) {
  if (!ranks || n < 2) return -1;
  int s = 0;
  for (int r = 1; r < n; r++)
    if (ranks[r].total_ms - ranks[r].comm_ms > ranks[s].total_ms - ranks[s].comm_ms) s = r;
  return s;
}

static double gflops(double flops, double s) { return s > 0 ? flops / s / 1e9 : 0; }

/* The share of the peak a row reached: the time its FLOPs would take at the peaks (f32 FLOPs at
 * the f32 peak, 16-bit ones at the 16-bit peak) over the time they took; 0 without a peak. */
static double peak_share(const row *r, const ts_prof_report_info *ri) {
  double low = ri->peak_gflops_low > 0 ? ri->peak_gflops_low : ri->peak_gflops;
  if (ri->peak_gflops <= 0 || r->total_s <= 0) return 0;
  double ideal = (r->flops - r->low_flops) / (ri->peak_gflops * 1e9) + r->low_flops / (low * 1e9);
  return ideal / r->total_s;
}

static const char *phase_name(int ph) { return ph ? "backward" : "forward"; }

/* The rank section: slowest rank by compute, how far above the median, who waits. */
static void ranks_report(const ts_prof_report_info *ri, ts__sb *b, cJSON *j) {
  int n = ri->nranks;
  const ts_prof_breakdown *R = ri->ranks;
  double *tot = malloc(sizeof *tot * (size_t)n), *cmp = malloc(sizeof *cmp * (size_t)n);
  if (!tot || !cmp) {
    free(tot);
    free(cmp);
    return;
  }
  int slow_tot = 0, waiter = 0;
  for (int r = 0; r < n; r++) {
    tot[r] = R[r].total_ms;
    cmp[r] = R[r].total_ms - R[r].comm_ms;
    if (tot[r] > tot[slow_tot]) slow_tot = r;
    double sh = R[r].total_ms > 0 ? R[r].comm_ms / R[r].total_ms : 0;
    double shw = R[waiter].total_ms > 0 ? R[waiter].comm_ms / R[waiter].total_ms : 0;
    if (sh > shw) waiter = r;
  }
  int slow = ts_prof_straggler(R, n);
  double mt = median(tot, n);
  /* the slowest rank against the median of the others (of two ranks, the other one) */
  double *oth = malloc(sizeof *oth * (size_t)n), mc = 0;
  int no = 0;
  for (int r = 0; oth && r < n; r++)
    if (r != slow) oth[no++] = cmp[r];
  mc = no ? median(oth, no) : cmp[slow];
  free(oth);
  double lo = tot[0], hi = tot[0];
  for (int r = 1; r < n; r++) {
    lo = tot[r] < lo ? tot[r] : lo;
    hi = tot[r] > hi ? tot[r] : hi;
  }
  ts__sb_printf(b, "\nranks (mean per step, ms)\n  %-6s %9s %8s %8s %8s %8s %8s %8s %8s\n", "rank", "step", "data",
                "forward", "backward", "comm", "optim", "other", "compute");
  cJSON *ja = cJSON_AddArrayToObject(j, "ranks");
  for (int r = 0; r < n; r++) {
    ts__sb_printf(b, "  %-6d %9.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", r, R[r].total_ms, R[r].data_ms,
                  R[r].forward_ms, R[r].backward_ms, R[r].comm_ms, R[r].optimizer_ms, R[r].other_ms, cmp[r]);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", r);
    cJSON_AddNumberToObject(o, "step_ms", R[r].total_ms);
    cJSON_AddNumberToObject(o, "data_ms", R[r].data_ms);
    cJSON_AddNumberToObject(o, "forward_ms", R[r].forward_ms);
    cJSON_AddNumberToObject(o, "backward_ms", R[r].backward_ms);
    cJSON_AddNumberToObject(o, "comm_exposed_ms", R[r].comm_ms);
    cJSON_AddNumberToObject(o, "optimizer_ms", R[r].optimizer_ms);
    cJSON_AddNumberToObject(o, "compute_ms", cmp[r]);
    cJSON_AddItemToArray(ja, o);
  }
  char line[512];
  double above = mc > 0 ? 100.0 * (cmp[slow] / mc - 1) : 0;
  double wslow = R[slow].total_ms > 0 ? 100.0 * R[slow].comm_ms / R[slow].total_ms : 0;
  snprintf(line, sizeof line,
           "slowest rank: rank %d: compute %.0f%% above the other ranks' median (%.3f vs %.3f ms per step); %.0f%% of its step "
           "waiting in gradient reduction", slow, above, cmp[slow], mc, wslow);
  ts__sb_printf(b, "  step spread %.3f..%.3f ms (median %.3f)\n  %s\n", lo, hi, mt, line);
  cJSON_AddNumberToObject(j, "straggler", slow);
  cJSON_AddStringToObject(j, "straggler_text", line);
  double wshare = R[waiter].total_ms > 0 ? 100.0 * R[waiter].comm_ms / R[waiter].total_ms : 0;
  if (waiter != slow && wshare > 0) {
    ts__sb_printf(b, "  rank %d waits most: %.0f%% of its step in gradient reduction (exposed communication)\n", waiter,
                  wshare);
    cJSON_AddNumberToObject(j, "most_waiting", waiter);
  }
  if (slow_tot != slow && mt > 0 && tot[slow_tot] > 1.02 * mt) /* only a real difference */
    ts__sb_printf(b, "  rank %d: step %.0f%% slower than the median; %.0f%% of its step waiting in gradient reduction\n",
                  slow_tot, 100.0 * (tot[slow_tot] / mt - 1),
                  R[slow_tot].total_ms > 0 ? 100.0 * R[slow_tot].comm_ms / R[slow_tot].total_ms : 0);
  free(tot);
  free(cmp);
}

int ts_prof_report(ts_prof *p, const ts_prof_report_info *info, char **text, char **json) {
  *text = NULL;
  if (json) *json = NULL;
  ts_prof_report_info ri;
  memset(&ri, 0, sizeof ri);
  if (info) ri = *info;
  if (!ri.top) ri.top = 15;
  drain(p);
  ts_prof_breakdown m;
  ts_prof_mean_breakdown(p, &m);
  double step_s = p->sum.total_ms / 1e3; /* all profiled steps */
  ts__sb b = {0};
  cJSON *j = cJSON_CreateObject();
  row *ops = NULL, *named = NULL, *colls = NULL, *spans = NULL, *fly = NULL;
  int nops = rows_of(p, TS_PROF_NODE, 0, 1, &ops), nnamed = rows_of(p, TS_PROF_NODE, 0, 0, &named);
  int ncoll = rows_of(p, TS_PROF_NODE, 1, 1, &colls), nspan = rows_of(p, TS_PROF_COMM, 0, 0, &spans);
  int nfly = rows_of(p, TS_PROF_COLLECTIVE, 0, 1, &fly); /* gradient buckets, issue to completion */
  if (!j || nops < 0 || nnamed < 0 || ncoll < 0 || nspan < 0 || nfly < 0) {
    cJSON_Delete(j);
    free(ops);
    free(named);
    free(colls);
    free(spans);
    free(fly);
    return ts_error_set(TS_ENOMEM, "profiler report: out of memory");
  }
  cJSON_AddStringToObject(j, "type", "profile");
  cJSON_AddNumberToObject(j, "rank", p->rank);
  cJSON_AddNumberToObject(j, "steps", (double)p->nsteps);
  cJSON_AddNumberToObject(j, "first_step", (double)p->first_step);
  cJSON_AddNumberToObject(j, "last_step", (double)p->last_step);
  cJSON_AddNumberToObject(j, "events", (double)ts_prof_recorded(p));
  cJSON_AddNumberToObject(j, "dropped", (double)ts_prof_dropped(p));
  ts__sb_printf(&b, "profile: %lld steps (%lld..%lld) on rank %d, %lld events, %lld dropped\n", (long long)p->nsteps,
                (long long)p->first_step, (long long)p->last_step, p->rank, (long long)ts_prof_recorded(p),
                (long long)ts_prof_dropped(p));
  const double tm = m.total_ms > 0 ? m.total_ms : 1;
  ts__sb_printf(&b,
                "step %.3f ms: data %.3f (%.0f%%)  forward %.3f (%.0f%%)  backward %.3f (%.0f%%)  comm exposed %.3f "
                "(%.0f%%)  optimizer %.3f (%.0f%%)  other %.3f (%.0f%%)\n",
                m.total_ms, m.data_ms, 100 * m.data_ms / tm, m.forward_ms, 100 * m.forward_ms / tm, m.backward_ms,
                100 * m.backward_ms / tm, m.comm_ms, 100 * m.comm_ms / tm, m.optimizer_ms, 100 * m.optimizer_ms / tm,
                m.other_ms, 100 * m.other_ms / tm);
  cJSON *jb = cJSON_AddObjectToObject(j, "step_ms");
  cJSON_AddNumberToObject(jb, "total", m.total_ms);
  cJSON_AddNumberToObject(jb, "data", m.data_ms);
  cJSON_AddNumberToObject(jb, "forward", m.forward_ms);
  cJSON_AddNumberToObject(jb, "backward", m.backward_ms);
  cJSON_AddNumberToObject(jb, "comm_exposed", m.comm_ms);
  cJSON_AddNumberToObject(jb, "optimizer", m.optimizer_ms);
  cJSON_AddNumberToObject(jb, "other", m.other_ms);
  if (ri.peak_gflops > 0) {
    const char *what = ri.peak_what ? ri.peak_what : "sgemm 512^3 calibration";
    if (ri.peak_gflops_low > 0)
      ts__sb_printf(&b, "peak %.1f GFLOP/s f32, %.1f GFLOP/s bf16 (%s)\n", ri.peak_gflops, ri.peak_gflops_low, what);
    else
      ts__sb_printf(&b, "peak %.1f GFLOP/s (%s)\n", ri.peak_gflops, what);
    cJSON_AddNumberToObject(j, "peak_gflops", ri.peak_gflops);
    if (ri.peak_gflops_low > 0) cJSON_AddNumberToObject(j, "peak_gflops_low", ri.peak_gflops_low);
    cJSON_AddStringToObject(j, "peak_what", what);
  }
  /* per op type */
  ts__sb_printf(&b, "\n%-20s %8s %10s %9s %7s %9s %6s\n", "op type", "calls", "total ms", "mean ms", "step%",
                "GFLOP/s", "%peak");
  cJSON *jo = cJSON_AddArrayToObject(j, "ops");
  for (int i = 0; i < nops; i++) {
    const row *r = &ops[i];
    double gf = gflops(r->flops, r->total_s), share = step_s > 0 ? 100 * r->total_s / step_s : 0;
    ts__sb_printf(&b, "%-20s %8lld %10.3f %9.4f %6.1f%%", r->name, (long long)r->calls, 1e3 * r->total_s,
                  1e3 * r->total_s / (double)r->calls, share);
    if (r->flops > 0) {
      ts__sb_printf(&b, " %9.2f", gf);
      if (ri.peak_gflops > 0) ts__sb_printf(&b, " %5.0f%%", 100 * peak_share(r, &ri));
    }
    ts__sb_put(&b, "\n", 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", r->name);
    cJSON_AddNumberToObject(o, "calls", (double)r->calls);
    cJSON_AddNumberToObject(o, "total_ms", 1e3 * r->total_s);
    cJSON_AddNumberToObject(o, "mean_ms", 1e3 * r->total_s / (double)r->calls);
    cJSON_AddNumberToObject(o, "share", share / 100);
    if (r->flops > 0) cJSON_AddNumberToObject(o, "gflops", gf);
    if (r->flops > 0 && ri.peak_gflops > 0) cJSON_AddNumberToObject(o, "peak_share", peak_share(r, &ri));
    cJSON_AddItemToArray(jo, o);
  }
  /* per operator */
  int top = nnamed < ri.top ? nnamed : ri.top;
  ts__sb_printf(&b, "\n%-40s %-16s %-8s %6s %10s %9s %7s %9s\n", "operator (top by time)", "op", "phase", "calls",
                "total ms", "mean ms", "step%", "GFLOP/s");
  cJSON *jn = cJSON_AddArrayToObject(j, "operators");
  for (int i = 0; i < top; i++) {
    const row *r = &named[i];
    double gf = gflops(r->flops, r->total_s), share = step_s > 0 ? 100 * r->total_s / step_s : 0;
    ts__sb_printf(&b, "%-40s %-16s %-8s %6lld %10.3f %9.4f %6.1f%%", r->name, r->cat, phase_name(r->phase),
                  (long long)r->calls, 1e3 * r->total_s, 1e3 * r->total_s / (double)r->calls, share);
    if (r->flops > 0) ts__sb_printf(&b, " %9.2f", gf);
    ts__sb_put(&b, "\n", 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "op", r->cat);
    cJSON_AddStringToObject(o, "phase", phase_name(r->phase));
    cJSON_AddNumberToObject(o, "calls", (double)r->calls);
    cJSON_AddNumberToObject(o, "total_ms", 1e3 * r->total_s);
    cJSON_AddNumberToObject(o, "mean_ms", 1e3 * r->total_s / (double)r->calls);
    cJSON_AddNumberToObject(o, "share", share / 100);
    if (r->flops > 0) cJSON_AddNumberToObject(o, "gflops", gf);
    cJSON_AddItemToArray(jn, o);
  }
  /* communication */
  cJSON *jc = cJSON_AddArrayToObject(j, "comm");
  if (ncoll || nspan || nfly) {
    ts__sb_printf(&b, "\n%-28s %6s %6s %10s %12s %10s\n", "communication", "group", "calls", "total ms", "MB/call",
                  "GB/s");
    /* pass 0: collective nodes; 1: buckets in flight (MB/call: a bucket's payload); 2: exposed waits */
    for (int pass = 0; pass < 3; pass++) {
      const row *rs = pass == 2 ? spans : pass ? fly : colls;
      for (int i = 0; i < (pass == 2 ? nspan : pass ? nfly : ncoll); i++) {
        const row *r = &rs[i];
        double mb = r->bytes / (double)r->calls / 1e6, bw = r->total_s > 0 ? r->bytes / r->total_s / 1e9 : 0;
        char nm[64];
        snprintf(nm, sizeof nm, "%s%s", r->name, pass == 2 ? " (exposed)" : pass ? " buckets" : "");
        ts__sb_printf(&b, "%-28s %6d %6lld %10.3f %12.3f %10.3f\n", nm, r->group, (long long)r->calls, 1e3 * r->total_s,
                      mb, bw);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", r->name);
        cJSON_AddBoolToObject(o, "exposed_wait", pass == 2);
        if (pass == 1) cJSON_AddBoolToObject(o, "buckets", 1);
        cJSON_AddNumberToObject(o, "group", r->group);
        cJSON_AddNumberToObject(o, "calls", (double)r->calls);
        cJSON_AddNumberToObject(o, "total_ms", 1e3 * r->total_s);
        cJSON_AddNumberToObject(o, "bytes", r->bytes);
        cJSON_AddNumberToObject(o, "gb_per_s", bw);
        cJSON_AddItemToArray(jc, o);
      }
    }
    if (nfly)
      ts__sb_printf(&b, "  (buckets: each gradient bucket's collective from its issue to its observed completion, "
                        "overlapping backward; MB/call = its payload)\n");
    if (nspan)
      ts__sb_printf(&b, "  (exposed: the wait after backward for reductions started during it; GB/s = bytes / "
                        "exposed time, a lower bound of what overlap hides)\n");
  }
  if (ri.arena_bytes > 0) {
    ts__sb_printf(&b, "\nmemory: training plan arena %.2f MiB (%.2f MiB without reuse)\n", ri.arena_bytes / 1048576.0,
                  ri.naive_bytes / 1048576.0);
    cJSON_AddNumberToObject(j, "arena_bytes", ri.arena_bytes);
    cJSON_AddNumberToObject(j, "naive_bytes", ri.naive_bytes);
  }
  if (ri.nranks > 1 && ri.ranks) ranks_report(&ri, &b, j);
  free(ops);
  free(named);
  free(colls);
  free(spans);
  free(fly);
  char *js = json ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  if (b.failed || (json && !js)) {
    free(b.s);
    free(js);
    return ts_error_set(TS_ENOMEM, "profiler report: out of memory");
  }
  *text = b.s ? b.s : calloc(1, 1);
  if (json) *json = js;
  return TS_OK;
}
