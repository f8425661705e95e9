/* Tessera pipeline-parallel schedules as data (docs/pipeline.md, "Schedules").
 *
 * A schedule is, for each of the P ranks of one pipeline (its "stages"), the ordered list of what
 * that rank computes in one training step of M micro-batches: forward or backward of a
 * micro-batch through one of its V virtual stages ("chunks"). The model is cut in P*V pieces;
 * piece k = chunk*P + stage runs on rank `stage` (Megatron's interleaved assignment; V = 1 for
 * gpipe and 1f1b, where piece = stage). Schedules are generated, checked (every op once, FIFO
 * order per edge, deadlock freedom by simulation), simulated with per-piece costs and drawn as
 * ASCII before anything runs.
 *
 * Everything here is pure computation: no MPI, no tensors; nothing printed except to a FILE* the
 * caller passes (ts_schedule_draw). Errors set ts_last_error(): TS_ECONFIG for sizes a user
 * configured (naming the config key), TS_EINVAL for bad arguments and invalid schedules. */
#ifndef TS_PARALLEL_SCHEDULE_H
#define TS_PARALLEL_SCHEDULE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TS_SCHED_GPIPE = 0, TS_SCHED_1F1B = 1, TS_SCHED_INTERLEAVED = 2 } ts_sched_kind;

/* One entry of a rank's list: forward (bwd = 0) or backward (bwd = 1) of micro-batch `micro`
 * (0..M-1) through the rank's virtual stage `chunk` (0..V-1), i.e. piece chunk*P + stage. */
typedef struct {
  int bwd;
  int micro;
  int chunk;
} ts_sched_op;

typedef struct ts_schedule ts_schedule;

/* Largest sizes accepted by ts_schedule_create (beyond them a schedule is a configuration
 * mistake, not a job): P, M, V each, and P*M*V (the schedule holds 2*P*M*V ops). */
#define TS_SCHED_MAX_STAGES 4096
#define TS_SCHED_MAX_MICRO (1 << 20)
#define TS_SCHED_MAX_VIRTUAL 64
#define TS_SCHED_MAX_WORK (1 << 24)

/* Kind from its config name ("gpipe", "1f1b", "interleaved_1f1b"). TS_ECONFIG naming
 * parallel.pipeline_schedule and the accepted names otherwise (name NULL included). */
int ts_sched_kind_parse(const char *name, ts_sched_kind *out);
/* Config name of a kind ("gpipe", "1f1b", "interleaved_1f1b"); "?" for a value out of range. */
const char *ts_sched_kind_name(ts_sched_kind k);

/* Generates the schedule of `kind` for P stages, M micro-batches, V virtual stages per rank:
 *   gpipe             all forwards in micro order, then all backwards in micro order;
 *   1f1b              stage s: min(P-s-1, M) warm-up forwards, then one forward / one backward,
 *                     then the remaining backwards (PipeDream-Flush, Megatron's non-interleaved);
 *   interleaved_1f1b  Megatron-LM's interleaved schedule: micro-batches in groups of P run
 *                     through the chunks in turn (forward chunk 0..V-1, backward V-1..0);
 *                     (P-s-1)*2 + (V-1)*P warm-up forwards (at most M*V), then 1F1B.
 * Refusals (TS_ECONFIG, one line naming parallel.pipeline_stages / parallel.micro_batches /
 * parallel.virtual_stages and the reason): P, M or V < 1; V > 1 with gpipe or 1f1b; interleaved
 * with M % P != 0; sizes over the TS_SCHED_MAX_* bounds. TS_EINVAL for an unknown kind or NULL
 * out, TS_ENOMEM. *out is NULL on failure. */
int ts_schedule_create(ts_sched_kind kind, int P, int M, int V, ts_schedule **out);
/* Frees a schedule (NULL is fine). */
void ts_schedule_free(ts_schedule *s);

/* Sizes and kind the schedule was created with (P, M, V). */
int ts_schedule_stages(const ts_schedule *s);
int ts_schedule_micro(const ts_schedule *s);
int ts_schedule_virtual(const ts_schedule *s);
ts_sched_kind ts_schedule_kind(const ts_schedule *s);

/* The ordered list of stage `stage`'s ops: returns the count (2*M*V for a generated schedule)
 * and sets *ops to the list, owned by s. TS_EINVAL (and *ops NULL) for a stage out of 0..P-1. */
int ts_schedule_ops(const ts_schedule *s, int stage, const ts_sched_op **ops);

/* Most micro-batches whose forward through (stage, chunk) has run and whose backward has not, at
 * any point of that rank's list: how many activation sets the executor must hold for the piece.
 * min(P-s, M) for 1f1b, M for gpipe. TS_EINVAL for stage or chunk out of range. */
int ts_schedule_max_inflight(const ts_schedule *s, int stage, int chunk);

/* Validity. Every (fwd|bwd, micro, chunk) exactly once per stage; per (phase, chunk) the
 * micro-batches in increasing order (the p2p messages of one edge match in FIFO order); and
 * deadlock freedom by simulation: ranks execute their lists in order; FWD(m, piece k) needs
 * FWD(m, k-1) done (k > 0), BWD(m, k) needs BWD(m, k+1) done (k < P*V-1) and FWD(m, k) done;
 * sends never block. TS_OK, or TS_EINVAL naming the first offending stage and op, or the ops the
 * stuck ranks wait at (and what each waits for) when deadlocked. */
int ts_schedule_check(const ts_schedule *s);

/* Simulation results: the step's time, the bubble fraction 1 - sum(busy) / (P * makespan), and
 * the largest per-stage busy and idle (makespan - busy) time. */
typedef struct {
  double makespan, bubble;
  double busy_max, idle_max;
} ts_sched_sim;

/* Event simulation of a valid schedule (ts_schedule_check first): every rank runs its list in
 * order, an op starts when its rank is free and its inputs are there; fwd[k], bwd[k] are the
 * costs of piece k (P*V entries each; NULL: 1 and 2), p2p the time of one transfer between
 * consecutive pieces on different ranks (none between pieces on one rank). Costs must be finite
 * and >= 0 (TS_EINVAL otherwise, or for a schedule that deadlocks). */
int ts_schedule_simulate(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, ts_sched_sim *out);

/* The same simulation, per op of stage `stage`: start[i] and end[i] of its i-th op (arrays of
 * ts_schedule_ops(s, stage) entries; either may be NULL), and its busy and idle time (NULL
 * allowed). For profilers and the executor's predicted timeline. */
int ts_schedule_simulate_stage(const ts_schedule *s, const double *fwd, const double *bwd, double p2p, int stage,
                               double *start, double *end, double *busy, double *idle);

/* The textbook bubble fraction (P-1) / (V*M + P-1); gpipe and 1f1b use V = 1 whatever V says.
 * NaN when P, M or V < 1 or kind is unknown. */
double ts_schedule_bubble_formula(ts_sched_kind kind, int P, int M, int V);

/* Draws the schedule as ASCII (for `tessera plan` and the docs), from the simulation with
 * forward cost 1, backward cost 2 and p2p 0: a header line, one row per stage with time running
 * right, a legend line. Each op is a cell "F3" / "B3" (micro-batch 3; with V > 1 "F3a", "F3b"...
 * for chunks 0, 1... ("F3c12" beyond 26 chunks)), one time unit being as many columns as the
 * longest forward label plus one, so backward cells are twice as wide; idle time is '.'.
 * Rows longer than max_cols columns end in "..." (max_cols 0: no limit; else at least 24).
 * TS_EINVAL for a bad argument or a schedule that deadlocks; TS_EIO when writing fails. */
int ts_schedule_draw(const ts_schedule *s, FILE *out, int max_cols);

#ifdef __cplusplus
}
#endif
#endif
