/* Internal: the state of the parallel pass over the whole model's graphs (dist_semi.c). The
 * semi_auto_parallel layout keeps one as its private state; the pipeline layout keeps one inside
 * its own when semi_auto_parallel runs inside its stages (dist_pipe.c). No other file sees it. */
#ifndef TS_DIST_SEMI_H
#define TS_DIST_SEMI_H

#include "distribution/dist.h"

typedef struct ts__semi {
  ts_parallel *pp, *pe;      /* the passes over the training and evaluation graphs */
  ts_graph *gg, *gge;        /* the whole model's graphs */
  ts_params *gp;             /* the whole model's store */
  ts_comm **slots, **eslots; /* the passes' slot communicators (nslots, neslots; malloc'd) */
  int nslots, neslots;
} ts__semi;

/* Frees what s holds (the communicators, the passes with the rank's graphs and store they own,
 * the whole model's graphs and store), not s itself. */
void ts__semi_release(ts__semi *s);

#endif
