/* Planning without allocating (src/train/trainer_plan.c, src/distribution/dist.c's sizing path): the
 * figures of a dry build that allocates nothing (the store laid out by ts_params_alloc_dry, the
 * plans made by ts_plan_create_dry) equal, field by field and byte for byte, those of the same
 * build allocating the store and arenas as the job does (ts_dist_config.dry_allocate), for the MLP,
 * the GPT and ResNet-20 under data parallel, GPT's tensor parallel 2, pipeline stages 2 (every
 * rank) and optimizer_shard 1, 2 and 3; and no data file is opened (the configs name missing
 * ones: GPT's input is data.seq_len tokens, the images' the data set's sample through the
 * transforms). Mixed precision (train.amp_level) is planned from the graphs the amp pass rewrote
 * (dry and allocating builds agree there too), with the 16-bit GEMMs at the 16-bit peak, and the
 * TP2 rank holds the same parameter bytes at O2 as in f32 (the casts of a cut weight are cut). */
#include <string.h>

#include "tessera/train.h"
#include "test_util.h"
#include "train/train_impl.h"

static const char *k_mlp =
    "model: {name: mlp, hidden: [64, 32]}\n"
    "data: {name: fashion_mnist, path: /nonexistent/fashion}\n"
    "train: {steps: 1, batch_size: 16}\n"
    "optimizer: {name: adam, lr: 0.001}\n";
static const char *k_gpt =
    "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 256, tie_weights: true}\n"
    "data: {name: text, path: /nonexistent/input.txt, seq_len: 16, transforms: []}\n"
    "train: {steps: 1, batch_size: 8}\n"
    "optimizer: {name: adamw, lr: 0.001}\n";
static const char *k_resnet =
    "model: {name: resnet, depth: 20}\n"
    "data: {name: fashion_mnist, path: /nonexistent/fashion}\n"
    "train: {steps: 1, batch_size: 8}\n"
    "optimizer: {name: momentum, lr: 0.05}\n";

/* One case on N devices: for every rank (a pipeline's differ; the others: rank 0 and N-1), the
 * sized and the allocated build's figures, equal. */
static void check_case(const char *name, const char *yaml, int N, const char *const *sets, int nsets) {
  ts_config cfg;
  int rc = ts_config_load_string(yaml, name, sets, nsets, &cfg);
  CHECK_MSG(rc == TS_OK, "%s: %s", name, ts_last_error());
  if (rc) {
    ts_config_free(&cfg);
    return;
  }
  for (int rank = 0; rank < N; rank += N - 1 > 0 ? N - 1 : 1) {
    ts_dist_memory_info a, b;
    int sized = 0, sized_b = 1;
    rc = ts__trainer_plan_memory(&cfg, N, rank, 0, &a, &sized);
    CHECK_MSG(rc == TS_OK, "%s rank %d (sized): %s", name, rank, ts_last_error());
    rc = ts__trainer_plan_memory(&cfg, N, rank, 1, &b, &sized_b);
    CHECK_MSG(rc == TS_OK, "%s rank %d (allocated): %s", name, rank, ts_last_error());
    CHECK_MSG(sized && !sized_b, "%s rank %d: the sized build allocated (%d) or the allocating one did not (%d)",
              name, rank, sized, sized_b);
    const char *f[] = {"param_bytes", "grad_bytes", "accum_bytes", "optimizer_state_bytes", "activation_bytes",
                       "eval_activation_bytes", "total_bytes"};
    int64_t x[] = {a.param_bytes, a.grad_bytes, a.accum_bytes, a.optimizer_state_bytes, a.activation_bytes,
                   a.eval_activation_bytes, a.total_bytes};
    int64_t y[] = {b.param_bytes, b.grad_bytes, b.accum_bytes, b.optimizer_state_bytes, b.activation_bytes,
                   b.eval_activation_bytes, b.total_bytes};
    for (int k = 0; k < 7; k++)
      CHECK_MSG(x[k] == y[k], "%s rank %d: %s sized %lld, allocated %lld", name, rank, f[k], (long long)x[k],
                (long long)y[k]);
    CHECK_MSG(a.param_bytes > 0 && a.activation_bytes > 0, "%s rank %d: empty figures", name, rank);
  }
  ts_config_free(&cfg);
}

static void test_sized_equals_allocated(void) {
  const char *dp[] = {"parallel.mode=data_parallel"};
  const char *z1[] = {"parallel.mode=data_parallel", "parallel.optimizer_shard=1", "parallel.optimizer_shard_threshold_kb=0"};
  const char *z2[] = {"parallel.mode=data_parallel", "parallel.optimizer_shard=2", "parallel.optimizer_shard_threshold_kb=0",
                      "train.micro_batch_size=4"};
  const char *z3[] = {"parallel.mode=data_parallel", "parallel.optimizer_shard=3", "parallel.optimizer_shard_threshold_kb=0"};
  const char *pp[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=4"};
  const char *tp[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", ts_test_gpt_tp2};
  const char *tppp[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", ts_test_gpt_tp2,
                        "parallel.pipeline_stages=2", "parallel.micro_batches=4"};
  const char *rec[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=4",
                       "model.recompute=full"};
  check_case("mlp dp2", k_mlp, 2, dp, 1);
  check_case("mlp zero1", k_mlp, 2, z1, 3);
  check_case("mlp zero2", k_mlp, 2, z2, 4);
  check_case("mlp zero3", k_mlp, 2, z3, 3);
  check_case("mlp pp2", k_mlp, 2, pp, 3);
  check_case("gpt one", k_gpt, 1, NULL, 0);
  check_case("gpt dp2", k_gpt, 2, dp, 1);
  check_case("gpt tp2", k_gpt, 2, tp, 3);
  check_case("gpt pp2", k_gpt, 2, pp, 3);
  check_case("gpt pp2 recompute", k_gpt, 2, rec, 4);
  check_case("gpt tp2 x pp2", k_gpt, 4, tppp, 5);
  check_case("gpt zero1", k_gpt, 2, z1, 3);
  check_case("gpt zero2", k_gpt, 2, z2, 4);
  check_case("gpt zero3", k_gpt, 2, z3, 3);
  check_case("resnet20 dp2", k_resnet, 2, dp, 1);
  check_case("resnet20 pp2", k_resnet, 2, pp, 3);
  check_case("resnet20 zero1", k_resnet, 2, z1, 3);
  const char *amp_tp[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", ts_test_gpt_tp2,
                          "train.amp_level=O2"};
  const char *amp_pp[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=4",
                          "train.amp_level=O2"};
  const char *amp_z3[] = {"parallel.mode=data_parallel", "parallel.optimizer_shard=3",
                          "parallel.optimizer_shard_threshold_kb=0", "train.amp_level=O3"};
  check_case("gpt tp2 O2", k_gpt, 2, amp_tp, 4);
  check_case("gpt pp2 O2", k_gpt, 2, amp_pp, 4);
  check_case("gpt zero3 O3", k_gpt, 2, amp_z3, 4);
  check_case("resnet20 dp2 O2", k_resnet, 2, (const char *[]){"parallel.mode=data_parallel", "train.amp_level=O2"}, 2);
}

/* Mixed precision: planned from the amp pass's graphs (16-bit GEMMs at the 16-bit peak, smaller
 * activations); under TP2 the rank's parameters are the f32 job's (cut weights stay cut). */
static void test_amp_planned(void) {
  ts_config c;
  const char *o2[] = {"train.amp_level=O2"};
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", NULL, 0, &c));
  ts_cluster cl;
  CHECK_OK(ts_cluster_builtin("dgx-a100-80g", &cl));
  ts_step_prediction f32, amp;
  CHECK_OK(ts_trainer_predict(&c, 1, 0, &cl, &f32));
  ts_config_free(&c);
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", o2, 1, &c));
  CHECK_OK(ts_trainer_predict(&c, 1, 0, &cl, &amp));
  CHECK_MSG(amp.gemm_s < f32.gemm_s / 10, "bf16 GEMMs %g s vs f32 %g s", amp.gemm_s, f32.gemm_s);
  CHECK_MSG(amp.memory_bytes < f32.memory_bytes, "amp memory %lld vs f32 %lld", (long long)amp.memory_bytes,
            (long long)f32.memory_bytes);
  const char *tp[] = {"parallel.mode=semi_auto_parallel", "parallel.full_batch=true", ts_test_gpt_tp2, "train.amp_level=O0"};
  ts_dist_memory_info m32, m2;
  int sized = 0;
  ts_config_free(&c);
  CHECK_OK(ts_config_load_string(k_gpt, "gpt", tp, 4, &c));
  CHECK_OK(ts__trainer_plan_memory(&c, 2, 0, 0, &m32, &sized));
  c.train.amp_level = 2;
  CHECK_OK(ts__trainer_plan_memory(&c, 2, 0, 0, &m2, &sized));
  CHECK_MSG(m2.param_bytes == m32.param_bytes && m2.param_bytes > 0, "TP2 rank 0 parameters: %lld at O2, %lld in f32",
            (long long)m2.param_bytes, (long long)m32.param_bytes);
  ts_config_free(&c);
}

int main(void) {
  test_sized_equals_allocated();
  test_amp_planned();
  return ts_test_finish("test_dry_plan");
}
