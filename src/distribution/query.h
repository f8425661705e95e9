/* Internal: the questions the trainer and the CLI ask a distribution object about its layout
 * and its gradient synchronisation, instead of reading the configuration keys that chose them
 * (dist.c, dist_ckpt.c). */
#ifndef TS_DIST_QUERY_H
#define TS_DIST_QUERY_H

#include <stddef.h>

#include "distribution/dist.h"

/* Pipeline stages of the layout (1 without a pipeline). */
int ts__dist_stages(const ts_dist *d);
/* The built layout's stage cut as parallel.stages rules (ts_stage_rules_of: operator-name
 * prefix -> piece, each piece being stage piece % stages; *rules malloc'ed, free it), which
 * rebuild exactly this cut through the distribution config's stage_rules; none (*n 0) without a
 * pipeline. */
int ts__dist_stage_rules(const ts_dist *d, ts_op_text **rules, int *n);
/* The checkpoint manifest's layout object of a job configured by c (parallel.mode `mode`):
 * {"mode": mode, "world_size": world, the pipeline layout's key, the sync object's keys,
 * "sliced_parameters": sliced, and "strategy_file" when strategy_file}, into buf. */
void ts__dist_manifest_layout(const ts_dist_config *c, const char *mode, int world, int sliced, int strategy_file,
                              char *buf, size_t cap);

#endif
