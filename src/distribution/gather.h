/* Internal: the parameter gathers of ZeRO-3 (gather.c; used by dist_zero.c, optimizer_shard 3).
 *
 * The sharded parameters are grouped into UNITS (ranges of the store's flat buffer made of whole
 * parameters, each cut into the ranks' contiguous parts); a rank keeps only its part of each unit.
 * Before a node of a plan reads a parameter, its whole unit is all-gathered into a GATHER SLOT,
 * a buffer the plan's parameter values are bound into once (static binding): the units share two
 * slots, unit k in slot k % 2, so the next unit is gathered while the current one is read; a unit
 * a node reads together with another unit of the same slot (a weight used far from its first use
 * next to a later unit's, e.g. tied embeddings) gets a slot of its own and stays gathered for the
 * run. For each plan the uses of every unit in the order the nodes run (forward, then backward)
 * are simulated once against the slots, giving a static list of gathers: (node that waits for
 * it, unit, the last node that reads the slot's previous unit); a plan hook starts each gather as
 * soon as that node has run and waits for it just before its reader runs. A unit evicted from its
 * slot and read again later (backward) is gathered again; one still in its slot is not. */
#ifndef TS_DIST_GATHER_H
#define TS_DIST_GATHER_H

#include "tessera/comm.h"
#include "tessera/params.h"
#include "tessera/runtime.h"

typedef struct {
  size_t off, len;      /* the unit's range of the store's flat buffer (whole parameters) */
  const size_t *counts; /* the N ranks' parts, contiguous in rank order (not copied: must outlive
                           the object) */
  size_t src;           /* where this rank's part sits in the source buffer (ts__gather_attach) */
} ts__gather_unit;

typedef struct ts__gather ts__gather;

/* Over the units of store p, gathering over comm (N ranks), or without one (comm NULL: the layout
 * only, for dry runs: no slot is allocated). */
int ts__gather_create(ts_comm *comm, int N, const ts_params *p, const ts__gather_unit *units, int nunits,
                      ts__gather **out);
void ts__gather_free(ts__gather *gt);
/* Registers a plan of graph g (at most 4): the nodes that run and the units they read. */
int ts__gather_add_plan(ts__gather *gt, const ts_graph *g, ts_plan *plan);
/* Assigns the slots over every registered plan, makes each plan's list of gathers and allocates
 * the slots (with a communicator). Call once, after the plans are added. */
int ts__gather_layout(ts__gather *gt);
/* Where parameter id lives in its unit's slot (NULL: in no unit, or no slots allocated). */
float *ts__gather_addr(ts__gather *gt, int id);
/* Adds the hook that runs the gathers to every registered plan; src holds this rank's parts. */
int ts__gather_attach(ts__gather *gt, const float *src);
/* A device running the gathers itself (ZeRO-3 on GPU ranks): the hooks ts__gather_attach added
 * removed (the host slots then unused). */
void ts__gather_detach(ts__gather *gt);
/* Gather i of the run of registered plan `plan` (in the order they are due): *node, the first node
 * reading the unit (it waits for it), and *unit; 0 past the last one (or an unknown plan). */
int ts__gather_op(const ts__gather *gt, const ts_plan *plan, int i, int *node, int *unit);
/* Unit u (NULL past the last) and its slot; slot q's buffer and floats (NULL when none). */
const ts__gather_unit *ts__gather_unit_at(const ts__gather *gt, int u, int *slot);
int ts__gather_num_slots(const ts__gather *gt);
float *ts__gather_slot_buf(const ts__gather *gt, int q, size_t *numel);
/* TS_OK, or the status of a gather that failed (message set; the slots were filled with NaN so
 * nothing computed from them passes for a result). */
int ts__gather_status(const ts__gather *gt);
/* Floats of the slots; *nslots / *dedicated: slots, and those holding one unit for a whole run. */
size_t ts__gather_slot_numel(const ts__gather *gt, int *nslots, int *dedicated);
/* Elements all-gathered by one run of registered plan k (the sum of the gathered units' lengths),
 * and the number of gathers. */
size_t ts__gather_run_numel(const ts__gather *gt, int k, int *ngathers);
/* Seconds the hooks waited for gathers since the last call (communication not hidden). */
double ts__gather_take_wait(ts__gather *gt);

#endif
