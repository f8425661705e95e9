/* Tessera models written with the C API: the model-builder callback every layout calls
 * (ts_trainer_create_custom, examples/hybrid_mlp.c), the device groups of a hybrid-parallel model,
 * and the memory figures of one rank (ts_trainer_memory, `tessera plan`).
 *
 * A builder (the trainer calls it for the training graph and, with targets TS_NONE, for the
 * evaluation graph):
 *   static int mlp(ts_nn *nn, ts_val x, ts_val y, const ts_model_info *info, ts_val *logits,
 *                  ts_val *loss, void *user) {
 *     *logits = ts_nn_dense(nn, "fc", ts_flatten(nn->g, x, 1), 10, 1);
 *     if (y != TS_NONE) *loss = ts_softmax_cross_entropy(nn->g, *logits, y, 0);
 *     return TS_OK;
 *   }
 *   ts_trainer_create_custom(&cfg, mlp, NULL, &t);   // tessera/train.h; examples/hybrid_mlp.c */
#ifndef TESSERA_MODEL_H
#define TESSERA_MODEL_H

#include "tessera/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models written with the C API ----
 * A model builder emits the forward graph through nn (layers, ts_nn_param or ts_params_add_sharded
 * parameters) from the batch x (rows, sample shape...) and the targets (rows) labels, or (rows,
 * sample shape...) for text; targets is TS_NONE for the evaluation graph (inference mode: return
 * only the logits). It sets *logits (rows, classes) or (rows, T, vocab) and, with targets, *loss
 * (a scalar). It is called twice (training and evaluation graph) and must register the same
 * parameters both times (ts_nn_param reuses them by name). Return TS_OK or a status with its
 * message set.
 *   stand_alone / data_parallel / semi_auto_parallel: the builder writes the single-process
 *   model (global shapes; under semi_auto_parallel the parallel pass cuts it by
 *   parallel.strategies).
 *   hybrid_parallel (MindSpore's manual mode): the builder writes THIS RANK's graph: parameters
 *   registered with ts_params_add_sharded (layer-wise parallel) hold only the rank's slice, and
 *   the builder places the collectives (ts_allreduce, ts_allgather, ...) by hand on plan
 *   communicator slots: slot 0 is every rank (info->size of them); ts_model_group() gives the
 *   slot of a device-matrix axis. The trainer inserts nothing but the gradient reduction of
 *   parameters several ranks hold (mean over them when parallel.gradients_mean, else sum; see
 *   ts_grad_reducer). Rows are the global batch / size per rank, or the whole batch with
 *   parallel.full_batch (model-parallel ranks must read the same samples). */
typedef struct ts_model_info {
  int rank, size;  /* this process and the job's ranks (1, 0 alone) */
  int training;    /* 1: the training graph, 0: the evaluation graph */
  void *priv;      /* the distribution object's */
} ts_model_info;
typedef int (*ts_model_fn)(ts_nn *nn, ts_val x, ts_val targets, const ts_model_info *info,
                           ts_val *logits, ts_val *loss, void *user);
/* hybrid_parallel: the plan communicator slot (1..) of the groups along `axis` of the device
 * matrix dev[0..ndev-1] (product = size; rank r's coordinates row-major, last axis fastest);
 * asking twice for the same group gives the same slot. Negative status on error. */
int ts_model_group(const ts_model_info *info, int ndev, const int *dev, int axis);

/* ---- memory of one rank ----
 * The bytes THIS rank holds for training, from the object's store, its optimizer-state sharding
 * and its plans: the same function answers for a real job (the trainer's measurement, the
 * train.max_memory_mb check) and for a dry run (`tessera plan`'s prediction). Every layout's
 * numbers come from here (a new layout or sharding stage adds its buffers in
 * src/distribution/dist_memory.c). */
typedef struct {
  int64_t param_bytes;           /* parameters and states of the rank's store; under
                                    parallel.optimizer_shard also the optimizer's working copy
                                    of the rank's part (replicated + its shard) */
  int64_t grad_bytes;            /* the gradient buffer backward writes, the accumulation buffer
                                    (accum_bytes), the gradient-compression buffer
                                    (parallel.comm_dtype bf16/f16), and under optimizer_shard the
                                    rank's reduced part (stage 2: and a second one) */
  int64_t accum_bytes;           /* of grad_bytes: the whole-model accumulation buffer (0 without
                                    accumulation and under optimizer_shard 2) */
  int64_t optimizer_state_bytes; /* optimizer slots x the elements the rank's optimizer updates */
  int64_t activation_bytes;      /* the training plan's arena: forward + backward temporaries at
                                    their planned peak */
  int64_t eval_activation_bytes; /* the evaluation plan's arena */
  int64_t total_bytes;           /* the sum of the above (accum_bytes counted once) */
} ts_dist_memory_info;

/* The sum of the fields of m (as total_bytes). */
int64_t ts_dist_memory_sum(const ts_dist_memory_info *m);
/* m on one line in binary units into buf (always NUL-terminated): "params 1.20 MiB, grads
 * 1.20 MiB, optimizer 2.40 MiB, activations 9.50 MiB (+ eval 1.10 MiB), total 15.40 MiB"; the
 * accumulation buffer is named inside grads when there is one. */
void ts_dist_memory_format(const ts_dist_memory_info *m, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
