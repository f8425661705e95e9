/* Chrome trace / Perfetto JSON: this rank's events as trace events, the merged file written
 * atomically, and the per-op table read back from a trace file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../base/afile.h"
#include "../base/rfile.h"
#include "prof_impl.h"

static const char *kind_name(int k) {
  static const char *const names[TS_PROF_KIND_COUNT] = {"node", "data",  "forward", "backward", "comm",
                                                        "optimizer", "eval", "checkpoint", "other", "step",
                                                        "collective"};
  return k >= 0 && k < TS_PROF_KIND_COUNT ? names[k] : "other";
}

static void event_json(ts__sb *b, const ts_prof *p, const ts_prof_event *e) {
  ts__sb_printf(b, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"", p->rank,
                e->track ? TS_PROF_TRACK_TID + e->track : e->tid);
  ts__sb_json_str(b, e->name ? e->name : "?");
  ts__sb_put(b, "\",\"cat\":\"", 9);
  ts__sb_json_str(b, e->cat ? e->cat : "?");
  ts__sb_printf(b, "\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld,\"kind\":\"%s\"", 1e6 * (e->t0 - p->origin),
                1e6 * (e->t1 - e->t0), (long long)e->step, kind_name(e->kind));
  if (e->kind == TS_PROF_NODE) ts__sb_printf(b, ",\"phase\":\"%s\"", e->phase ? "backward" : "forward");
  if (e->flops > 0) ts__sb_printf(b, ",\"flops\":%.0f", e->flops);
  if (e->coll || e->bytes) ts__sb_printf(b, ",\"bytes\":%lld", (long long)e->bytes);
  if (e->coll || e->group) ts__sb_printf(b, ",\"group\":%d", e->group);
  if (e->args && e->args[0]) {
    ts__sb_put(b, ",", 1);
    ts__sb_put(b, e->args, strlen(e->args));
  }
  ts__sb_put(b, "}}", 2);
}

int ts_prof_trace_events(const ts_prof *p, char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  ts__sb b = {0};
  ts__sb_printf(&b,
                "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}},"
                "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
                p->rank, p->rank, p->rank, p->rank);
  int n = atomic_load(&p->nrings);
  uint8_t *named = calloc(65536, 1); /* tracks given a name (their first event's) */
  if (!named) b.failed = 1;
  for (int k = 0; named && k < n && k < p->cfg.max_threads; k++) {
    const ts__prof_ring *r = &p->rings[k];
    if (!atomic_load_explicit(&r->ready, memory_order_acquire)) continue;
    ts__sb_printf(&b, ",{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s %d\"}}",
                  p->rank, r->tid, r->tid ? "thread" : "main", r->tid);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire), cap = r->mask + 1;
    for (uint64_t i = h > cap ? h - cap : 0; i < h; i++) {
      const ts_prof_event *e = &r->ev[i & r->mask];
      if (e->track && !named[e->track]) { /* a track: named after its first event, below the threads */
        named[e->track] = 1;
        int tid = TS_PROF_TRACK_TID + e->track;
        ts__sb_printf(&b, ",{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"",
                      p->rank, tid);
        ts__sb_json_str(&b, e->name ? e->name : "track");
        ts__sb_printf(&b, "\"}},{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
                      "\"args\":{\"sort_index\":%d}}", p->rank, tid, tid);
      }
      ts__sb_put(&b, ",", 1);
      event_json(&b, p, e);
    }
  }
  free(named);
  if (b.failed) {
    free(b.s);
    return ts_error_set(TS_ENOMEM, "profiler trace: out of memory");
  }
  *buf = b.s;
  *len = b.n;
  return TS_OK;
}

int ts_prof_trace_write(const char *path, const char *const *parts, const size_t *lens, int n, int64_t dropped) {
  ts__afile *f;
  int rc = ts__afile_open(path, &f);
  if (rc) return ts_error_wrap(rc, "log.trace");
  static const char head[] = "{\"traceEvents\":[\n";
  rc = ts__afile_write(f, head, sizeof head - 1);
  int first = 1;
  for (int i = 0; !rc && i < n; i++) {
    if (!parts[i] || !lens[i]) continue;
    if (!first) rc = ts__afile_write(f, ",\n", 2);
    if (!rc) rc = ts__afile_write(f, parts[i], lens[i]);
    first = 0;
  }
  char tail[256];
  int k = snprintf(tail, sizeof tail,
                   "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tessera %s\",\"ranks\":%d,"
                   "\"dropped_events\":%lld}}\n",
                   ts_version(), n, (long long)dropped);
  if (!rc) rc = ts__afile_write(f, tail, (size_t)k);
  if (rc) {
    ts__afile_abort(f);
    return rc;
  }
  return ts__afile_commit(f);
}

/* ---- reading a trace back ---- */
typedef struct {
  char *key, *op, *phase;
  long long calls;
  double us, flops;
} trow;

static int trow_cmp(const void *a, const void *b) {
  double x = ((const trow *)a)->us, y = ((const trow *)b)->us;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int trow_add(trow **rows, int *n, int *cap, const char *key, const char *op, const char *phase, double us,
                    double flops) {
  for (int i = 0; i < *n; i++)
    if (!strcmp((*rows)[i].key, key) && !strcmp((*rows)[i].op, op)) {
      (*rows)[i].calls++;
      (*rows)[i].us += us;
      (*rows)[i].flops += flops;
      return TS_OK;
    }
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 64;
    trow *t = realloc(*rows, sizeof *t * (size_t)nc);
    if (!t) return TS_ENOMEM;
    *rows = t;
    *cap = nc;
  }
  trow *r = &(*rows)[(*n)++];
  r->key = strdup(key);
  r->op = strdup(op);
  r->phase = strdup(phase);
  r->calls = 1;
  r->us = us;
  r->flops = flops;
  return r->key && r->op && r->phase ? TS_OK : TS_ENOMEM;
}

static void trows_free(trow *r, int n) {
  for (int i = 0; i < n; i++) {
    free(r[i].key);
    free(r[i].op);
    free(r[i].phase);
  }
  free(r);
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

int ts_prof_trace_summary(const char *path, int top, char **text) {
  *text = NULL;
  char *buf;
  size_t len;
  int rc = ts__file_read_all(path, "cannot read the trace", &buf, &len);
  if (rc) return rc;
  cJSON *root = cJSON_ParseWithLength(buf, len);
  free(buf);
  const cJSON *evs = root ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
  if (!cJSON_IsArray(evs)) {
    cJSON_Delete(root);
    return ts_error_set(TS_EFORMAT, "%s: not a Chrome trace (a JSON object with a traceEvents array)", path);
  }
  trow *ops = NULL, *named = NULL;
  int nops = 0, cops = 0, nnamed = 0, cnamed = 0, nx = 0, maxpid = -1;
  double step_us = 0, steps = 0, parts[TS_PROF_KIND_COUNT] = {0};
  const cJSON *e;
  rc = TS_OK;
  cJSON_ArrayForEach(e, evs) {
    const char *ph = str_of(e, "ph");
    if (!ph || strcmp(ph, "X")) continue;
    const char *name = str_of(e, "name"), *cat = str_of(e, "cat");
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur"), *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!name || !cat || !cJSON_IsNumber(dur)) {
      rc = ts_error_set(TS_EFORMAT, "%s: trace event %d has no name, cat or dur", path, nx);
      break;
    }
    nx++;
    if (cJSON_IsNumber(pid) && pid->valueint > maxpid) maxpid = pid->valueint;
    const char *kind = args ? str_of(args, "kind") : NULL, *phase = args ? str_of(args, "phase") : NULL;
    const cJSON *fl = args ? cJSON_GetObjectItemCaseSensitive(args, "flops") : NULL;
    double flops = cJSON_IsNumber(fl) ? fl->valuedouble : 0;
    if (kind && !strcmp(kind, "step")) {
      step_us += dur->valuedouble;
      steps++;
      continue;
    }
    if (kind && strcmp(kind, "node")) { /* spans: the breakdown */
      for (int k = 1; k < TS_PROF_KIND_COUNT; k++)
        if (!strcmp(kind, kind_name(k))) parts[k] += dur->valuedouble;
      continue;
    }
    if ((rc = trow_add(&ops, &nops, &cops, cat, cat, "", dur->valuedouble, flops)) ||
        (rc = trow_add(&named, &nnamed, &cnamed, name, cat, phase ? phase : "", dur->valuedouble, flops))) {
      rc = ts_error_set(TS_ENOMEM, "%s: out of memory", path);
      break;
    }
  }
  cJSON_Delete(root);
  if (rc) {
    trows_free(ops, nops);
    trows_free(named, nnamed);
    return rc;
  }
  qsort(ops, (size_t)nops, sizeof *ops, trow_cmp);
  qsort(named, (size_t)nnamed, sizeof *named, trow_cmp);
  ts__sb b = {0};
  ts__sb_printf(&b, "%s: %d events, %d rank(s), %.0f steps, %.3f ms per step (over the ranks)\n", path, nx, maxpid + 1,
                steps, steps > 0 ? step_us / steps / 1e3 : 0);
  if (steps > 0) {
    double s = steps;
    ts__sb_printf(&b, "step breakdown (ms): data %.3f  forward %.3f  backward %.3f  comm exposed %.3f  optimizer %.3f\n",
                  parts[TS_PROF_DATA] / s / 1e3, parts[TS_PROF_FORWARD] / s / 1e3, parts[TS_PROF_BACKWARD] / s / 1e3,
                  parts[TS_PROF_COMM] / s / 1e3, parts[TS_PROF_OPTIMIZER] / s / 1e3);
  }
  ts__sb_printf(&b, "\n%-20s %8s %10s %9s %7s %9s\n", "op type", "calls", "total ms", "mean ms", "step%", "GFLOP/s");
  for (int i = 0; i < nops; i++) {
    const trow *r = &ops[i];
    ts__sb_printf(&b, "%-20s %8lld %10.3f %9.4f %6.1f%%", r->key, r->calls, r->us / 1e3, r->us / 1e3 / (double)r->calls,
                  step_us > 0 ? 100 * r->us / step_us : 0);
    if (r->flops > 0) ts__sb_printf(&b, " %9.2f", r->flops / (r->us * 1e3));
    ts__sb_put(&b, "\n", 1);
  }
  if (top <= 0) top = 15;
  ts__sb_printf(&b, "\n%-40s %-16s %-8s %6s %10s %9s %7s\n", "operator (top by time)", "op", "phase", "calls", "total ms",
                "mean ms", "step%");
  for (int i = 0; i < nnamed && i < top; i++) {
    const trow *r = &named[i];
    ts__sb_printf(&b, "%-40s %-16s %-8s %6lld %10.3f %9.4f %6.1f%%\n", r->key, r->op, r->phase, r->calls, r->us / 1e3,
                  r->us / 1e3 / (double)r->calls, step_us > 0 ? 100 * r->us / step_us : 0);
  }
  trows_free(ops, nops);
  trows_free(named, nnamed);
  if (b.failed) {
    free(b.s);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  *text = b.s;
  return TS_OK;
}
