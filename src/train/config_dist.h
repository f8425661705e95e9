/* Internal: the config's distribution keys as the distribution layer's configuration. */
#ifndef TS_TRAIN_CONFIG_DIST_H
#define TS_TRAIN_CONFIG_DIST_H

#include "distribution/dist.h"
#include "tessera/config.h"

/* The distribution keys (train.* batch sizes and seed, parallel.*, the optimizer's needs) as a
 * distribution object's configuration (src/distribution/dist.h). Its fusion splits and stage
 * rules point into cfg (valid while cfg lives unchanged; ts_dist_create copies them). */
void ts_config_dist(const ts_config *cfg, ts_dist_config *out);

#endif
