/* Internal: a configuration as the key of the distribution layer's compatibility table
 * (src/distribution/compat.h): config validation, the trainer and `tessera launch` ask the table
 * about the configuration through it. */
#ifndef TS_TRAIN_COMPAT_H
#define TS_TRAIN_COMPAT_H

#include "distribution/compat.h"
#include "tessera/config.h"

/* The table's key of cfg: parallel.mode's name, its stages, sharding stage and group, virtual
 * stages, schedule, wire dtype and the keys that go with them (config_validate.c). */
void ts__config_compat_key(const ts_config *cfg, ts__compat_key *k);
/* The ranks one pipeline stage's strategies cut: ndevices over the stages (when they divide
 * it), else ndevices. */
int ts__config_stage_ranks(const ts_config *cfg, int ndevices);

/* The pipeline stages of a trainer's distribution object (1 without a pipeline; trainer.c). */
struct ts_trainer;
int ts__trainer_stages(const struct ts_trainer *t);

#endif
