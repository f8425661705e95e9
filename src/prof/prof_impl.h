/* Internal pieces of the profiler shared by its files (prof.c: rings, aggregation, the report;
 * trace.c: Chrome-trace JSON). */
#ifndef TS_PROF_IMPL_H
#define TS_PROF_IMPL_H

#include "../base/text.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>

#include "tessera/prof.h"

/* One recording thread's ring: written by its thread only, read by the aggregating thread. */
typedef struct {
  ts_prof_event *ev;
  uint64_t mask;          /* capacity - 1 */
  _Atomic uint64_t head;  /* events ever written (next slot = head & mask) */
  uint64_t agg;           /* events aggregated so far (aggregating thread only) */
  _Atomic int ready;      /* ev allocated */
  int tid;
} ts__prof_ring;

/* Aggregate of one event name (pointer identity). */
typedef struct {
  const char *name, *cat;
  int64_t calls;
  double total_s, flops, low_flops, bytes;
  int32_t group;
  uint8_t kind, phase, coll;
} ts__prof_agg;

struct ts_prof {
  ts_prof_config cfg;
  int rank;
  uint64_t gen; /* identifies this profiler in the threads' ring caches */
  ts__prof_ring *rings;
  _Atomic int nrings;
  ts__prof_agg *tab;
  size_t tab_cap; /* power of 2, >= 2 * max_names */
  int tab_n;
  _Atomic int active;
  int64_t cur_step, first_step, last_step;
  double step_t0, origin;
  int in_step;
  ts_prof_breakdown cur, sum; /* this step's parts; the sum over ended steps */
  int64_t nsteps;
  _Atomic int64_t dropped_extra; /* unclaimed threads, names beyond max_names */
  int64_t lost_agg;              /* overwritten before aggregation */
};


#endif
