/* The automatic-parallel search as the layers above call it (the trainer, `tessera plan`): a
 * model, the distribution config of the caller's keys and a cluster in, a typed plan
 * (include/tessera/autoparallel.h) out. Pure: no MPI; every candidate is built dry (sized, nothing
 * allocated) through the distribution objects and priced by the planner's cost model. */
#ifndef TS_AUTOPARALLEL_AUTOPLAN_H
#define TS_AUTOPARALLEL_AUTOPLAN_H

#include "tessera/autoparallel.h"
#include "distribution/dist.h"
#include "planner/planner.h"
#include "tessera/zoo.h"

/* What the search needs of the job besides the cluster. */
typedef struct ts_autoparallel_job {
  ts_dist_model model;    /* the network: its builder and one sample (model.strategies is ignored) */
  ts_dist_config base;    /* the distribution config of the caller's keys; a plan sets its degrees,
                             micro-batching, shard stage and recompute on a copy (ts__autoplan_dist) */
  int64_t batch_size;     /* global rows per step (train.batch_size) */
  double max_memory_mb;   /* train.max_memory_mb (<= 0: only the device memory limits) */
  int optim_slots;        /* the optimizer's state slots per element */
  int amp_level;          /* train.amp_level (the bounds' bytes per parameter, the peak rate) */
  int search_mode;        /* parallel.search_mode: ts_search_mode of the per-operator search */
  const ts_gpt_config *gpt; /* the zoo's GPT: Megatron-LM's cuts and the arithmetic bounds; NULL else */
  int seq_len;            /* GPT: data.seq_len */
  const ts_op_text *fixed; /* sharding_propagation: the user's operator strategies (parallel.strategies),
                              kept fixed; not owned */
  int nfixed;
  /* Optional: the caller's refusal of plan p under its own keys (TS_ECONFIG naming the key; the
   * search keeps the message as the plan's why), TS_OK to build it. */
  int (*check)(const ts_autoplan *p, void *user);
  void *check_user;
  double time_budget;     /* parallel.search_time_budget: seconds; then the best plan so far (0: none) */
  int cp;                 /* parallel.context_parallel: every plan's context-parallel degree (<= 1: none) */
  int cp_algo;            /* parallel.context_parallel_algo: TS_CP_ULYSSES, TS_CP_RING */
} ts_autoparallel_job;

/* Every plan of the outer search for job on N devices of cluster cl (cands: up to cap of them,
 * *n written, without strategies): data x tensor x pipeline degrees (tensor parallelism inside a
 * node when the job spans nodes), micro-batch counts (a pipeline's P, 2P, 4P and those of 1, 2,
 * 4, 8 rows per replica), interleaved 1F1B with 2 pieces per rank (M a multiple of P), the
 * optimizer shard stage and recompute. For GPT each gets arithmetic lower bounds of its memory
 * and step first; the candidates are priced in the order of their step bound, and one whose
 * memory bound exceeds the device (or max_memory_mb), or whose step bound exceeds the best plan
 * priced so far, is not built (its why says so). The rest are built dry and priced. *out: the
 * fastest that fits (equally fast: the one needing less memory), with its strategies (free with
 * ts_autoplan_free). Deterministic. TS_ECONFIG when none fits (saying by how much the smallest
 * exceeds the memory); *out is then zeroed. cands may be NULL with cap 0 only if no listing is
 * wanted: then a search of up to 16384 candidates runs in a buffer of its own. */
int ts__autoparallel_search(const ts_autoparallel_job *job, int N, const ts_cluster *cl, ts_autoplan *cands, int cap,
                            int *n, ts_autoplan *out);
/* The strategies of plan p's degrees (tp > 1: Megatron-LM's cuts when p->megatron, else the
 * per-operator search on cl) into p->strategies (replacing any); nothing for tp 1. Also fills
 * p->devices, p->search_mode and p->cluster. */
int ts__autoplan_strategies(const ts_autoparallel_job *job, const ts_cluster *cl, ts_autoplan *p);
/* Plan p applied to the distribution config dc (the caller's keys: ts_autoparallel_job.base):
 * pipeline stages, micro-batches and schedule, the rows of a micro-step and of evaluation,
 * optimizer shard stage, recompute, full batch, the stage cut (p's stage rules, when it has any:
 * dc then borrows them); *vt the layout it runs (stand_alone,
 * data_parallel, semi_auto_parallel, or pipeline), *semi 1 when the operators are cut by
 * strategies (semi_auto_parallel); batch: global rows per step. */
void ts__autoplan_dist(const ts_autoplan *p, int64_t batch, ts_dist_config *dc, const ts_dist_vt **vt, int *semi);
/* Plan p's stage cut (pp > 1) into p->stage_rules: rank 0 of the plan built dry (p's strategies
 * and its stage rules, if any, in force: else the layout's balanced cut or the config's
 * parallel.stages) and its cut read back as rules (ts__dist_stage_rules), replacing p's; none
 * for pp 1. The errors of the build (p unchanged). */
int ts__autoplan_cuts(const ts_autoparallel_job *job, ts_autoplan *p);
/* The step of rank `rank` of a job of N devices running layout vt with dc and model m (its
 * strategies in m->strategies) predicted on cluster cl: the rank (and, with pipeline stages, the
 * first and last stage's first rank) built dry and priced (ts_step_prediction). optim_slots: the
 * optimizer's slots; batch: global rows per step. */
int ts__autoparallel_predict(const ts_dist_vt *vt, const ts_dist_config *dc, const ts_dist_model *m, int optim_slots,
                             int64_t batch, int N, int rank, const ts_cluster *cl, ts_step_prediction *out);
/* The per-operator search (opsearch.c): m's network as one process's forward graph of `rows`
 * global rows, its cost graph on dp x tp devices of cl (the batch cut dp ways, memory limited by
 * the device and max_memory_mb > 0), searched by `mode` (ts_search_mode; sharding_propagation
 * keeps fixed[0..nfixed-1] as given); the chosen strategies into a new set for dp * tp devices
 * (*out; folded into '*' rules where every layer takes the same strategy), the cost graph's total
 * into *cost (may be NULL). */
int ts__autoparallel_op_search(const ts_dist_model *m, int64_t rows, int dp, int tp, const ts_cluster *cl,
                               double max_memory_mb, int optim_slots, int mode, const ts_op_text *fixed, int nfixed,
                               ts_strategy_set **out, double *cost);

#endif
