/* Tessera automatic parallelism (parallel.mode auto_parallel; docs/auto-parallel.md): the search
 * over data x tensor x pipeline degrees, micro-batches, interleaved pipeline pieces, the
 * optimizer shard stage and recompute, priced by the cost model on a cluster description, gives
 * a PLAN: a value, handed to the distribution layer as it is (the operators' strategies as a
 * strategy set, the degrees as the distribution config's fields), never as config text.
 *
 * The trainer runs the search for parallel.mode auto_parallel (include/tessera/train.h:
 * ts_trainer_autoplan gives the plan a trainer runs, ts_trainer_autoplan_search every plan of
 * a config, as `tessera plan --search` prints them). */
#ifndef TESSERA_AUTOPARALLEL_H
#define TESSERA_AUTOPARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The step time the cost model predicts for one rank of a job on a cluster (planner.h): the
 * rank's training graph priced per micro-step (GEMM-like ops by FLOPs, the rest by bytes, its
 * collectives and pipeline sends by the alpha-beta model), times the micro-steps, plus the
 * data-parallel gradient reduction (hidden behind backward where it overlaps), a pipeline's
 * bubble ((P-1)/(V*M) of its micro-steps), the optimizer's pass over its state and, on a GPU
 * cluster, the batches' copies to the device. */
typedef struct {
  double step_s, samples_per_s;
  double compute_s, gemm_s, other_s; /* per step (all micro-steps) */
  double collectives_s;              /* the graph's collectives and p2p, per step */
  double reduce_s, reduce_exposed_s; /* gradient reduction and its part not hidden */
  double bubble_s, optimizer_s;
  double flops;                      /* per step on the rank */
  int64_t micro_steps;
  int64_t memory_bytes;              /* per device (ts_dist_memory's total, the fullest rank) */
  int64_t activation_bytes;          /* of memory_bytes: that rank's activation_bytes (its arena) */
  /* optimizer sharding (stages 1, 2) priced by the cluster's measured reduce-scatter and all-gather
   * lines for this very layout (tessera calibrate across the hosts): its buckets (0: priced from
   * the links), 1 where they run as rings (0: MPI's), the seconds of their reduce-scatters and of
   * their all-gathers per step (both inside reduce_s) */
  int zero_buckets, zero_ring;
  double zero_reduce_scatter_s, zero_allgather_s;
  /* a GPU cluster (h2d_bw > 0): each micro-step's batch (inputs and labels) copied to the device
   * before its run, not overlapped (inside step_s) */
  double input_s;
} ts_step_prediction;

/* One plan: the degrees (dp * tp * pp = devices), the micro-batches of a step, the pieces per
 * pipeline rank, the optimizer shard stage, recompute; for tp > 1 the operators' strategies;
 * its prediction; whether it fits the device memory and train.max_memory_mb, else (or when the
 * layouts refuse it, or its bounds ruled it out before it was built) why.
 * Stage cuts: a pipeline plan (pp > 1) carries its cut of the model into pp * virtual_stages
 * pieces as stage rules (parallel.stages' form: an operator-name prefix -> its piece, piece k
 * running on stage k % pp), read back from the plan's dry build (the pipeline layout's balanced
 * cut, or the config's parallel.stages where it gives any); the run builds exactly that cut. */
typedef struct {
  int dp, tp, pp;
  int micro_batches;   /* per step: a pipeline's micro-batches, or gradient accumulation's (1: none) */
  int virtual_stages;  /* pieces per pipeline rank (interleaved 1F1B when > 1; 0 or 1: one) */
  int zero;            /* optimizer shard stage 0..3 (parallel.optimizer_shard) */
  int recompute;       /* 0 none, 1 full, 2 selective (model.recompute) */
  int megatron;        /* tp > 1: 1 = Megatron-LM's cuts (the zoo's GPT), 0 = the per-operator
                          search of parallel.search_mode (include/tessera/search.h) */
  int sp;              /* tp > 1: Megatron's sequence parallelism (parallel.sequence_parallel) */
  int cp;              /* context parallelism (0 or 1: none): the sequence cut cp ways beside tp
                          (dp * cp * tp * pp = devices; Megatron's cuts only,
                          ts_gpt_context_strategies) */
  int cp_algo;         /* cp > 1: TS_CP_ULYSSES (all-to-alls to the heads' cut) or TS_CP_RING
                          (ring attention; parallel.context_parallel_algo) */
  ts_strategy_set *strategies; /* tp > 1: the operators' strategies on dp * tp devices (owned:
                                  ts_autoplan_free); NULL for tp 1 and for a candidate of a search
                                  listing (only the chosen plan carries them) */
  ts_op_text *stage_rules;     /* pp > 1: the stage cut, n_stage_rules rules (owned: ts_autoplan_free;
                                  op: the prefix, text: the piece in decimal); NULL for pp 1 and for a
                                  candidate of a search listing */
  int n_stage_rules;
  ts_step_prediction pred;     /* predicted step and memory per device (pred.memory_bytes) */
  int fits;
  int priced;          /* built and priced (0: refused, or pruned by its bounds before building) */
  double mem_bound, time_bound; /* arithmetic lower bounds of its memory (bytes) and step (s); 0: none */
  char why[256];
  /* where it was decided (ts_autoplan_describe) */
  int devices;         /* dp * tp * pp */
  int searched;        /* plans the search considered (0: the degrees were given, parallel.auto_tp) */
  int search_mode;     /* the per-operator search (ts_search_mode) of a tensor-parallel plan */
  char cluster[64];    /* the cluster description it was priced on */
} ts_autoplan;

/* Frees p's strategies and stage rules (p itself is the caller's); both are NULL after. NULL is
 * fine. */
void ts_autoplan_free(ts_autoplan *p);
/* A deep copy of src into *dst (its own strategies and stage rules); TS_ENOMEM. *dst is
 * overwritten, not freed. */
int ts_autoplan_copy(ts_autoplan *dst, const ts_autoplan *src);
/* The ranks a plan's operator cuts span: tp * cp (1: none, data parallel or one process). */
int ts_autoplan_model_ways(const ts_autoplan *p);
/* "none", "full" or "selective" for a plan's recompute (0, 1, 2). */
const char *ts_autoplan_recompute_name(int recompute);
/* The rows of one micro-batch on each data-parallel replica: batch / (dp * micro_batches). */
int ts_autoplan_micro_batch_size(const ts_autoplan *p, int64_t batch_size);
/* "dp=2,tp=1,pp=1,micro_batches=1,zero=0,recompute=none" (",virtual_stages=V" when > 1,
 * ",cuts=megatron|search" when tp > 1); always NUL-terminated. */
void ts_autoplan_str(const ts_autoplan *p, char *buf, size_t cap);
/* One line saying what the plan is and where it comes from, as the trainer logs it:
 * "auto_parallel on 4 devices of dgx-a100-80g: dp=...,... (predicted 1.234 ms per step, 5.67 MiB
 * per device; 96 plans searched)", or for given degrees (searched 0) "auto_parallel on 4 devices
 * of ...: data parallel 2 x tensor parallel 2 x 1 stages (parallel.auto_tp), operators searched
 * by dynamic_programming: 7 strategies". Always NUL-terminated. */
void ts_autoplan_describe(const ts_autoplan *p, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
