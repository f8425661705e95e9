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

/* The config's layout keys for the rest of the trainer (config_validate.c): stages and sharding
 * stage set (enable_parallel_optimizer follows the stage), the stages (1 without a pipeline),
 * parallel.auto_tp's fit on N ranks (TS_ECONFIG naming the keys), and the settings that would cut
 * a rank's memory m on `ranks` ranks as a list for train.max_memory_mb's refusal ("" when none
 * applies: then the text of ts__config_memory_cuts_none). */
void ts__config_set_layout(ts_config *c, int stages, int shard_stage);
int ts__config_stages(const ts_config *c);
int ts__config_check_auto_tp(const ts_config *c, int N);
/* parallel.context_parallel > 1 where its cuts can be generated: the zoo's GPT, no user
 * strategies under semi_auto_parallel, not with sequence_parallel (TS_ECONFIG naming the keys);
 * TS_OK when it is 1. The mode itself is the compatibility table's. */
int ts__config_check_context_parallel(const ts_config *c);
void ts__config_memory_cuts(const ts_config *c, const ts_dist_memory_info *m, int ranks, char *buf, size_t cap);
extern const char *const ts__config_memory_cuts_none;

/* The pipeline stages of a trainer's distribution object (1 without a pipeline; trainer.c). */
struct ts_trainer;
int ts__trainer_stages(const struct ts_trainer *t);

#endif
