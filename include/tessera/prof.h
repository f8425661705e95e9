/* Tessera profiler: timed events recorded into per-thread ring buffers, the step broken into
 * data / forward / backward / exposed communication / optimizer / other, per-op-type and
 * per-operator tables with achieved GFLOP/s, communication per collective kind, a straggler
 * report over ranks, and Chrome-trace / Perfetto JSON. Depends on base only: what an event is
 * (a node of a graph, a trainer span) is decided by the caller, which hands over stable strings.
 *
 *   ts_prof_config pc = ts_prof_config_default();  pc.mode = TS_PROF_TRACE;
 *   ts_prof *p;  ts_prof_create(&pc, rank, &p);
 *   per step: ts_prof_step_begin(p, step, t0);
 *             ts_prof_record(p, &ev) ... (any thread, no lock, no allocation);
 *             ts_prof_step_end(p, t1, &breakdown);
 *   at the end: ts_prof_report(p, &info, &text, &json);  ts_prof_trace_events(p, &buf, &len);
 *               ts_prof_trace_write(path, parts, lens, n, ...);
 *
 * Times are ts_time_now() seconds (monotonic). Strings handed to the profiler (event names,
 * categories, argument fragments) are stored as pointers and must outlive it. */
#ifndef TESSERA_PROF_H
#define TESSERA_PROF_H

#include "tessera/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_PROF_OFF = 0,     /* nothing recorded (no hook installed) */
  TS_PROF_SUMMARY = 1, /* step breakdown and tables at the end */
  TS_PROF_TRACE = 2,   /* the same, and a Chrome trace of the recorded events */
} ts_prof_mode;

/* What an event's time counts as in the step breakdown. */
typedef enum {
  TS_PROF_NODE = 0,  /* an executed graph node (inside a forward or backward span) */
  TS_PROF_DATA,      /* waiting for the next batch */
  TS_PROF_FORWARD,   /* the forward part of a plan run */
  TS_PROF_BACKWARD,  /* the backward part of a plan run */
  TS_PROF_COMM,      /* exposed communication: waiting for the gradient reduction */
  TS_PROF_OPTIMIZER, /* gradient norm / clipping and the optimizer update */
  TS_PROF_EVAL,      /* evaluation (between steps, not step time) */
  TS_PROF_CKPT,      /* checkpoint (between steps, not step time) */
  TS_PROF_OTHER,     /* other spans inside a step */
  TS_PROF_STEP,      /* the step itself (recorded by ts_prof_step_end) */
  TS_PROF_COLLECTIVE, /* a collective in flight, from its issue to its observed completion (a
                         gradient bucket's all-reduce), overlapping other work: shown on its own
                         track, not a part of the step breakdown */
  TS_PROF_KIND_COUNT
} ts_prof_kind;

typedef struct {
  const char *name;  /* node name ("fc1/dense") or span name ("data"); not copied */
  const char *cat;   /* op name ("dense") or span category ("trainer"); not copied */
  const char *args;  /* NULL, or a JSON fragment of members without braces
                        ("\"in\":[[64,784],[512,784]]"); not copied */
  double t0, t1;     /* start and end, ts_time_now() seconds */
  double flops;      /* floating-point operations of the event, 0 when not computable */
  int64_t bytes;     /* bytes a collective moves per rank, 0 otherwise */
  int64_t step;      /* set by ts_prof_record: the step in progress */
  int32_t group;     /* a collective's group size, 0 otherwise */
  int32_t tid;       /* set by ts_prof_record: the recording thread (0 = the first) */
  uint8_t kind;      /* ts_prof_kind */
  uint8_t phase;     /* 0 forward, 1 backward (nodes) */
  uint8_t coll;      /* 1: a collective (bytes and group are meaningful) */
  uint8_t low;       /* 1: a node computing in a 16-bit float type (bf16, f16): its FLOPs count
                        against the report's peak_gflops_low */
  uint16_t track;    /* 0: the recording thread's row of the trace; k > 0: the process's track k
                        (trace tid TS_PROF_TRACK_TID + k, named after its first event), for spans
                        that overlap the thread's own (one track per gradient bucket) */
} ts_prof_event;

/* The trace tid of track k > 0: TS_PROF_TRACK_TID + k. */
#define TS_PROF_TRACK_TID 1000

typedef struct {
  ts_prof_mode mode;
  int ring_events;   /* events per thread ring (rounded up to a power of 2); 0: 16384 for
                        summary, 262144 for trace */
  int max_threads;   /* recording threads (rings); 0: 8 */
  int max_names;     /* distinct event names aggregated; 0: 4096 (beyond: counted as dropped) */
} ts_prof_config;

/* The step broken down (milliseconds). total = the step; other = total - the named parts. */
typedef struct {
  double total_ms, data_ms, forward_ms, backward_ms, comm_ms, optimizer_ms, other_ms;
  double steps; /* steps averaged (ts_prof_mean_breakdown), 1 for one step */
} ts_prof_breakdown;

typedef struct ts_prof ts_prof;

/* Defaults: mode off, sizes 0 (chosen by the mode). */
ts_prof_config ts_prof_config_default(void);
/* A profiler for rank `rank`; the calling thread gets ring 0, preallocated. TS_EINVAL for a bad
 * mode or negative sizes, TS_ENOMEM. Not recording until ts_prof_set_active(p, 1). */
int ts_prof_create(const ts_prof_config *cfg, int rank, ts_prof **out);
void ts_prof_free(ts_prof *p);
ts_prof_mode ts_prof_get_mode(const ts_prof *p);
/* Time 0 of the trace (e.g. ts_time_now() right after a barrier on every rank: clocks aligned). */
void ts_prof_set_origin(ts_prof *p, double t);
/* Recording on (1) or off (0); ts_prof_record and the step calls do nothing while off. */
void ts_prof_set_active(ts_prof *p, int on);
int ts_prof_active(const ts_prof *p);
/* Gives the calling thread its own ring now (allocates once), so its first event does not.
 * TS_ERANGE when max_threads rings are taken. */
int ts_prof_attach_thread(ts_prof *p);
/* Hot path: copies *e (step and tid filled in) into the calling thread's ring; no lock, no
 * allocation (except a thread's first event without ts_prof_attach_thread). When the ring is
 * full the oldest event is overwritten and counted as dropped. */
void ts_prof_record(ts_prof *p, const ts_prof_event *e);
/* A step starts at time t (its number: 1-based, as in the metrics). */
void ts_prof_step_begin(ts_prof *p, int64_t step, double t);
/* The step ends at t: records the step event, aggregates every ring's new events into the
 * tables and returns this step's breakdown in *out (may be NULL). */
void ts_prof_step_end(ts_prof *p, double t, ts_prof_breakdown *out);
/* The mean breakdown over the steps ended so far (zeros and steps 0 when none). */
void ts_prof_mean_breakdown(const ts_prof *p, ts_prof_breakdown *out);
/* Events recorded and events lost (overwritten in a ring before being aggregated or written,
 * names beyond max_names, threads beyond max_threads). */
int64_t ts_prof_recorded(const ts_prof *p);
int64_t ts_prof_dropped(const ts_prof *p);

/* ---- the report ---- */
typedef struct {
  double peak_gflops;           /* measured f32 peak (0: no %peak column) */
  double peak_gflops_low;       /* measured bf16 peak for the events marked low (0: peak_gflops) */
  const char *peak_what;        /* how the peaks were measured (NULL: "sgemm 512^3 calibration") */
  double arena_bytes, naive_bytes; /* the training plan's memory (0: not shown) */
  int nranks;                   /* ranks[] entries (0 or 1: no rank section) */
  const ts_prof_breakdown *ranks; /* each rank's mean breakdown, index = rank */
  int top;                      /* operators listed (0: 15) */
} ts_prof_report_info;
/* The summary as a table (*text) and as one JSON line {"type":"profile",...} (*json), both
 * malloc'ed (free them). With several ranks it names the slowest rank (the largest compute time:
 * step minus exposed communication), how far above the median, and the rank that waits most. */
int ts_prof_report(ts_prof *p, const ts_prof_report_info *info, char **text, char **json);
/* The slowest rank of ranks[0..n) by compute time (total - comm), -1 when n < 2. */
int ts_prof_straggler(const ts_prof_breakdown *ranks, int n);

/* ---- Chrome trace / Perfetto JSON ---- */
/* This rank's events still in the rings, as comma-separated trace events ("ph":"X", ts and dur
 * in microseconds from the origin, pid = rank, tid = thread, args with step, phase, flops,
 * bytes, group and the event's fragment), with process and thread name metadata; *buf is
 * malloc'ed (free it), *len its length. */
int ts_prof_trace_events(const ts_prof *p, char **buf, size_t *len);
/* Writes {"traceEvents":[parts...],"displayTimeUnit":"ms","otherData":{...}} atomically (temp
 * file, fsync, rename) to path: the parts of every rank joined. dropped: events lost, said in
 * otherData. TS_EIO naming the path. */
int ts_prof_trace_write(const char *path, const char *const *parts, const size_t *lens, int n, int64_t dropped);
/* Reads a trace file and writes the per-op-type and per-operator tables of its X events
 * (calls, total and mean ms, share of the summed steps) into *text (malloc'ed). TS_EFORMAT
 * naming the file when it is not a trace. */
int ts_prof_trace_summary(const char *path, int top, char **text);

#ifdef __cplusplus
}
#endif
#endif
