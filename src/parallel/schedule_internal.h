/* Internal to src/parallel/ and the tests: a schedule built from hand-written lists, so that
 * ts_schedule_check can be shown broken schedules (duplicates, wrong order, deadlocks). */
#ifndef TS_PARALLEL_SCHEDULE_INTERNAL_H
#define TS_PARALLEL_SCHEDULE_INTERNAL_H

#include "parallel/schedule.h"

/* A schedule of P stages whose stage s runs lists[s][0..counts[s]) as given (copied; nothing is
 * validated beyond P, M, V >= 1 and counts >= 0: that is ts_schedule_check's job). TS_EINVAL,
 * TS_ENOMEM; *out NULL on failure. */
int ts__schedule_from_lists(ts_sched_kind kind, int P, int M, int V, const ts_sched_op *const *lists,
                            const int *counts, ts_schedule **out);

#endif
