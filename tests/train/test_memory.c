/* Memory accounting, measured and predicted (docs/memory.md). For the GPT (text) and ResNet-20
 * (Fashion-MNIST) trained 2 steps, with and without accumulation and recompute: the figures the
 * trainer measures where it allocated them (ts_trainer_memory: the store, the optimizer's slots,
 * the accumulation buffer, the plans' arenas) against the prediction of `tessera plan`
 * (ts_trainer_plan_memory: a dry build of the same rank), within 10% field by field; the metrics'
 * end record carries the measured fields and the peak resident set covers them. Under mpirun -n 2
 * (data_parallel) also parallel.optimizer_shard 1 and 2: the optimizer state is the rank's half of
 * the sharded parameters plus the replicated ones, and stage 2 has no whole-model gradient or
 * accumulation buffer (two bucket staging slots and the rank's reduced parts). train.max_memory_mb: a budget below the prediction is refused by ts_trainer_create
 * (TS_ECONFIG naming the key and the settings that cut it) and by ts_trainer_plan. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/train.h"
#include "test_util.h"

static char g_dir[64], g_txt[128];
static int g_rank, g_size;

static const char *k_gpt =
    "model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, dropout: 0.1}\n"
    "data: {name: text, seq_len: 32, val_fraction: 0.1, transforms: [], num_workers: 1}\n"
    "train: {steps: 2, batch_size: 8, seed: 5, eval_every: -1, log_every: 1}\n"
    "optimizer: {name: adamw, lr: 0.003}\n"
    "log: {progress: off}\n";

static const char *k_resnet =
    "model: {name: resnet, depth: 20}\n"
    "data: {name: fashion_mnist, train_limit: 64, test_limit: 32, num_workers: 1}\n"
    "train: {steps: 2, batch_size: 16, seed: 5, eval_every: -1, log_every: 1}\n"
    "optimizer: {name: momentum, lr: 0.05}\n"
    "log: {progress: off}\n";

static int has(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* The config of a case: the model's YAML, the data path, the world's layout, then `sets`. */
static int load(const char *yaml, const char *data, const char *const *sets, int nsets, ts_config *cfg) {
  const char *all[16];
  char dp[300], met[200];
  int n = 0;
  snprintf(dp, sizeof dp, "data.path=%s", data);
  snprintf(met, sizeof met, "log.metrics=%s/m%d.jsonl", g_dir, g_rank);
  all[n++] = dp;
  all[n++] = met;
  if (g_size > 1) all[n++] = "parallel.mode=data_parallel";
  for (int i = 0; i < nsets && n < 16; i++) all[n++] = sets[i];
  return ts_config_load_string(yaml, "memory-test.yaml", all, n, cfg);
}

/* a within 10% of b (both 0 counts as equal) */
static int near(int64_t a, int64_t b) {
  if (a == b) return 1;
  double d = (double)(a > b ? a - b : b - a);
  return d <= 0.10 * (double)(a > b ? a : b);
}

/* An integer field of the metrics' end record of this rank's file (-1 if absent). */
static long long end_field(const char *field) {
  char path[200], line[8192], key[96];
  snprintf(path, sizeof path, "%s/m%d.jsonl", g_dir, g_rank);
  snprintf(key, sizeof key, "\"%s\":", field);
  FILE *f = fopen(path, "r");
  long long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (has(line, "\"type\":\"end\"")) {
      const char *p = strstr(line, key);
      v = p ? atoll(p + strlen(key)) : -1;
    }
  if (f) fclose(f);
  return v;
}

typedef struct {
  ts_dist_memory_info pred, meas;
  int64_t numel;     /* trainable elements of the rank's store */
  int64_t small;     /* of them, in parameters under the optimizer_shard threshold */
  int64_t rss;
} figures;

/* Trains the case 2 steps; predicted and measured figures, compared field by field. */
static int run_case(const char *name, const char *yaml, const char *data, const char *const *sets, int nsets,
                    figures *fg) {
  memset(fg, 0, sizeof *fg);
  ts_config cfg;
  CHECK_OK(load(yaml, data, sets, nsets, &cfg));
  CHECK_OK(ts_trainer_plan_memory(&cfg, g_size, g_rank, NULL, NULL, &fg->pred));
  ts_trainer *t = NULL;
  CHECK_OK(ts_trainer_create(&cfg, &t));
  if (!t) return 0;
  CHECK_OK(ts_trainer_fit(t));
  CHECK_OK(ts_trainer_memory(t, &fg->meas));
  fg->rss = ts_mem_peak_rss();
  ts_params *p = ts_trainer_params(t);
  fg->numel = (int64_t)ts_params_numel(p);
  for (int i = 0; i < ts_params_count(p); i++) {
    ts_shape s = ts_params_shape(p, i);
    if (!(ts_params_flags(p, i) & TS_PARAM_STATE) &&
        (double)ts_shape_numel(&s) * 4 < cfg.parallel.optimizer_shard_threshold_kb * 1024)
      fg->small += ts_shape_numel(&s);
  }
  ts_trainer_free(t);
  const ts_dist_memory_info *a = &fg->pred, *b = &fg->meas;
  const char *fname[] = {"param_bytes", "grad_bytes", "accum_bytes", "optimizer_state_bytes", "activation_bytes",
                         "eval_activation_bytes", "total_bytes"};
  int64_t pa[] = {a->param_bytes, a->grad_bytes, a->accum_bytes, a->optimizer_state_bytes, a->activation_bytes,
                  a->eval_activation_bytes, a->total_bytes};
  int64_t pb[] = {b->param_bytes, b->grad_bytes, b->accum_bytes, b->optimizer_state_bytes, b->activation_bytes,
                  b->eval_activation_bytes, b->total_bytes};
  for (int k = 0; k < 7; k++)
    CHECK_MSG(near(pa[k], pb[k]), "%s: %s predicted %lld, measured %lld (more than 10%% apart)", name, fname[k],
              (long long)pa[k], (long long)pb[k]);
  CHECK_MSG(b->param_bytes > 0 && b->grad_bytes > 0 && b->activation_bytes > 0 && b->eval_activation_bytes > 0,
            "%s: a measured figure is 0", name);
  CHECK(b->total_bytes == ts_dist_memory_sum(b));
  /* every buffer was written during the 2 steps and the evaluation: resident */
  CHECK_MSG(fg->rss >= b->total_bytes, "%s: peak RSS %lld below the buffers' %lld", name, (long long)fg->rss,
            (long long)b->total_bytes);
  /* the end record has the measured fields (rank 0 writes it; the max over the ranks beside) */
  if (g_rank == 0) {
    CHECK_MSG(end_field("param_bytes") == b->param_bytes && end_field("grad_bytes") == b->grad_bytes &&
                  end_field("optimizer_state_bytes") == b->optimizer_state_bytes &&
                  end_field("activation_peak_bytes") == b->activation_bytes && end_field("peak_rss_bytes") > 0,
              "%s: the end record's memory fields differ from ts_trainer_memory", name);
    if (g_size > 1) CHECK_MSG(end_field("ranks") == g_size, "%s: no memory_max_over_ranks in the end record", name);
  }
  printf("%s (rank %d of %d): predicted / measured bytes: params %lld / %lld, grads %lld / %lld (accumulation %lld / "
         "%lld), optimizer %lld / %lld, activations %lld / %lld, eval %lld / %lld, total %lld / %lld; peak RSS %lld\n",
         name, g_rank, g_size, (long long)a->param_bytes, (long long)b->param_bytes, (long long)a->grad_bytes,
         (long long)b->grad_bytes, (long long)a->accum_bytes, (long long)b->accum_bytes,
         (long long)a->optimizer_state_bytes, (long long)b->optimizer_state_bytes, (long long)a->activation_bytes,
         (long long)b->activation_bytes, (long long)a->eval_activation_bytes, (long long)b->eval_activation_bytes,
         (long long)a->total_bytes, (long long)b->total_bytes, (long long)fg->rss);
  return 1;
}

static void models(const char *name, const char *yaml, const char *data, int slots) {
  figures f0, f1;
  char n1[64], n2[64];
  snprintf(n1, sizeof n1, "%s", name);
  snprintf(n2, sizeof n2, "%s, accumulation 2, recompute full", name);
  const char *acc[] = {"train.micro_batch_size=4", "model.recompute=full"};
  if (!strcmp(name, "resnet20")) acc[0] = "train.micro_batch_size=8";
  if (!run_case(n1, yaml, data, NULL, 0, &f0) || !run_case(n2, yaml, data, acc, 2, &f1)) return;
  const int64_t n = f0.numel * 4;
  CHECK(f0.meas.grad_bytes == n && f0.meas.accum_bytes == 0 && f0.meas.optimizer_state_bytes == slots * n);
  CHECK(f1.meas.accum_bytes == n && f1.meas.grad_bytes == 2 * n);
  CHECK_MSG(f1.meas.activation_bytes < f0.meas.activation_bytes, "%s: half the micro-batch with recompute full "
            "plans %lld activation bytes, not fewer than %lld", name, (long long)f1.meas.activation_bytes,
            (long long)f0.meas.activation_bytes);
}

/* data_parallel on this job's ranks: optimizer_shard 1 and 2 against plain (GPT, adamw). */
static void sharding(void) {
  figures pl, s1, s1d, pa, s2;
  const char *plain[] = {"parallel.optimizer_shard_threshold_kb=0"};
  const char *z1[] = {"parallel.optimizer_shard=1", "parallel.optimizer_shard_threshold_kb=0"};
  const char *z1d[] = {"parallel.optimizer_shard=1"}; /* default threshold: small parameters replicated */
  const char *pacc[] = {"train.micro_batch_size=4", "parallel.optimizer_shard_threshold_kb=0"};
  const char *z2[] = {"parallel.optimizer_shard=2", "parallel.optimizer_shard_threshold_kb=0",
                      "train.micro_batch_size=4", "parallel.bucket_size_mb=0.02"};
  if (!run_case("gpt plain data_parallel", k_gpt, g_txt, plain, 1, &pl) ||
      !run_case("gpt optimizer_shard 1", k_gpt, g_txt, z1, 2, &s1) ||
      !run_case("gpt optimizer_shard 1, threshold 64 KiB", k_gpt, g_txt, z1d, 1, &s1d) ||
      !run_case("gpt plain, accumulation 2", k_gpt, g_txt, pacc, 2, &pa) ||
      !run_case("gpt optimizer_shard 2, accumulation 2", k_gpt, g_txt, z2, 4, &s2))
    return;
  const double N = g_size, n = (double)pl.numel, slots = 2; /* adamw */
  /* plain: every rank holds the whole optimizer state */
  CHECK(pl.meas.optimizer_state_bytes == (int64_t)(slots * n * 4));
  /* stage 1, everything sharded: the rank's part of every bucket, ceil(len / N) at most */
  double r1 = (double)s1.meas.optimizer_state_bytes / (double)pl.meas.optimizer_state_bytes;
  CHECK_MSG(r1 > 1 / N - 0.01 && r1 < 1 / N + 0.01, "optimizer_shard 1: the rank's optimizer state is %.4f of the "
            "whole, not 1/%d", r1, g_size);
  /* with the threshold: the replicated remainder on top of 1/N of the rest */
  double want = (double)s1d.small + (n - (double)s1d.small) / N;
  double got = (double)s1d.meas.optimizer_state_bytes / (slots * 4);
  CHECK_MSG(got > want - 0.01 * n && got < want + 0.01 * n, "optimizer_shard 1 (64 KiB): %.0f optimizer elements, "
            "expected about %.0f (%lld replicated + the rest / %d)", got, want, (long long)s1d.small, g_size);
  /* stage 2 (buckets of 0.02 MiB; the largest parameter, 16384 floats, is a bucket of its own): no
   * whole-model gradient or accumulation buffer: two staging slots of a bucket each (each with room
   * for a reduced part: micro-steps add them) and the rank's reduced parts, 1/N of the model; stage 1
   * keeps backward's whole buffer and plain its accumulation buffer too */
  CHECK(pa.meas.accum_bytes == (int64_t)(n * 4) && s2.meas.accum_bytes == 0);
  const double B = 16384 * 4, nparams = 32; /* the 2-layer GPT has fewer than 32 tensors: parts rounded up */
  double g2 = (double)s2.meas.grad_bytes / (n * 4), bound = 1 / N + (2 * B + 2 * (B / N + 4) + 4 * nparams) / (n * 4);
  CHECK_MSG(g2 <= bound, "optimizer_shard 2: gradients %.4f of the model, above the bound %.4f (1/%d + two buckets "
            "and their parts)", g2, bound, g_size);
  CHECK(s1.meas.grad_bytes >= (int64_t)(n * 4));
  printf("sharding on %d ranks: optimizer state %.4f of plain (stage 1), %.4f with the 64 KiB threshold; gradients "
         "%.4f of the model under stage 2 with accumulation (bound %.4f), %.4f under stage 1, plain with accumulation "
         "%.4f\n", g_size, r1, (double)s1d.meas.optimizer_state_bytes / (double)pl.meas.optimizer_state_bytes, g2,
         bound, (double)s1.meas.grad_bytes / (n * 4), (double)pa.meas.grad_bytes / (n * 4));
}

/* train.max_memory_mb: refused below the prediction (creation and plan), accepted above it. */
static void budget(void) {
  ts_config cfg;
  ts_dist_memory_info m;
  CHECK_OK(load(k_gpt, g_txt, NULL, 0, &cfg));
  CHECK_OK(ts_trainer_plan_memory(&cfg, g_size, g_rank, NULL, NULL, &m));
  double need_mb = (double)m.total_bytes / 1048576.0;
  char over[64], under[64];
  snprintf(under, sizeof under, "train.max_memory_mb=%.3f", need_mb * 0.8);
  snprintf(over, sizeof over, "train.max_memory_mb=%.3f", need_mb * 1.2);
  const char *s_under[] = {under}, *s_over[] = {over};
  ts_trainer *t = NULL;
  CHECK_OK(load(k_gpt, g_txt, s_under, 1, &cfg));
  int rc = ts_trainer_create(&cfg, &t);
  const char *e = ts_last_error();
  CHECK_MSG(rc == TS_ECONFIG && !t, "a budget of 80%% of the need: status %d", rc);
  CHECK_MSG(has(e, "train.max_memory_mb: ") && has(e, "per rank is less than") && has(e, "optimizer ") &&
                has(e, "model.recompute: full or selective") && !strchr(e, '\n'),
            "%s", e);
  if (g_size > 1) CHECK_MSG(has(e, "on the largest rank") && has(e, "parallel.optimizer_shard: 1 or 2"), "%s", e);
  ts_trainer_free(t);
  t = NULL;
  char *text = NULL;
  CHECK(ts_trainer_plan(&cfg, g_size, g_rank, NULL, NULL, &text) == TS_ECONFIG);
  CHECK_MSG(has(text, "does NOT fit") && has(ts_last_error(), "train.max_memory_mb"), "%s", text ? text : "(none)");
  free(text);
  CHECK_OK(load(k_gpt, g_txt, s_over, 1, &cfg));
  CHECK_OK(ts_trainer_create(&cfg, &t));
  ts_trainer_free(t);
  CHECK_OK(ts_trainer_plan(&cfg, g_size, g_rank, NULL, NULL, &text));
  CHECK(has(text, "fits"));
  free(text);
}

int main(void) {
  ts_job_rank(&g_rank, &g_size);
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_memory_XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  snprintf(g_txt, sizeof g_txt, "%s/input.txt", g_dir);
  FILE *f = fopen(g_txt, "wb");
  CHECK(f != NULL);
  if (f) {
    for (int i = 0; i < 400; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog %d.\n", i, i * 7);
    fclose(f);
  }
  models("gpt", k_gpt, g_txt, 2);
  if (ts_test_have_fashion_mnist()) models("resnet20", k_resnet, ts_test_fashion_mnist_dir(), 1);
  if (g_size > 1) sharding();
  budget();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  CHECK(system(cmd) == 0);
  return ts_test_finish_job("test_memory");
}
