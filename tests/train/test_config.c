/* Configuration: defaults, every key round-tripping through YAML and --set, each class of error
 * with its message, the hash, conversions, the examples and the docs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/config.h"
#include "train/config_dist.h"
#include "test_util.h"

#ifndef TS_FIXTURE_DIR
#define TS_FIXTURE_DIR "tests/fixtures"
#endif
#define REPO_DIR TS_FIXTURE_DIR "/../.."

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* warnings said through ts_log while capturing: their count and the last one */
static int g_nwarn;
static char g_warn[2048];
static void warn_hook(ts_log_level level, const char *msg, void *user) {
  (void)user;
  if (level < TS_LOG_WARN) return;
  g_nwarn++;
  snprintf(g_warn, sizeof g_warn, "%s", msg);
}
static void warn_capture_start(void) {
  g_nwarn = 0;
  g_warn[0] = 0;
  ts_log_set_hook(warn_hook, NULL);
}
static void warn_capture_stop(void) { ts_log_set_hook(NULL, NULL); }

static int strats_equal(const ts_cfg_strategies *a, const ts_cfg_strategies *b) {
  return a->n == b->n && (a->n == 0 || !memcmp(a->v, b->v, sizeof *a->v * (size_t)a->n));
}

/* Equality of two configs ignoring `source`: memcmp of the struct with its lists of any length
 * (malloc'd: pointers differ) blanked, and those lists by content. */
static int cfg_equal(const ts_config *a, const ts_config *b) {
  ts_config *x = malloc(sizeof *x), *y = malloc(sizeof *y);
  if (!x || !y) {
    free(x);
    free(y);
    return 0;
  }
  *x = *a;
  *y = *b;
  ts_config *both[2] = {x, y};
  for (int i = 0; i < 2; i++) {
    memset(&both[i]->parallel.strategies, 0, sizeof both[i]->parallel.strategies);
    memset(&both[i]->parallel.stages, 0, sizeof both[i]->parallel.stages);
    memset(&both[i]->parallel.all_reduce_fusion_config, 0, sizeof both[i]->parallel.all_reduce_fusion_config);
    memset(&both[i]->optimizer.schedule.values, 0, sizeof both[i]->optimizer.schedule.values);
    memset(&both[i]->optimizer.no_decay_params, 0, sizeof both[i]->optimizer.no_decay_params);
    memset(&both[i]->optimizer.param_groups, 0, sizeof both[i]->optimizer.param_groups);
  }
  const ts_cfg_pgroups *ga = &a->optimizer.param_groups, *gb = &b->optimizer.param_groups;
  int same_groups = ga->n == gb->n;
  for (int i = 0; same_groups && i < ga->n; i++)
    same_groups = !strcmp(ga->v[i].pattern, gb->v[i].pattern) && ga->v[i].lr_scale == gb->v[i].lr_scale &&
                  ga->v[i].weight_decay == gb->v[i].weight_decay;
  const ts_cfg_slist *na = &a->optimizer.no_decay_params, *nb = &b->optimizer.no_decay_params;
  int same_names = na->n == nb->n;
  for (int i = 0; same_names && i < na->n; i++) same_names = !strcmp(na->v[i], nb->v[i]);
  const ts_cfg_ilist *fa = &a->parallel.all_reduce_fusion_config, *fb = &b->parallel.all_reduce_fusion_config;
  const ts_cfg_flist *va = &a->optimizer.schedule.values, *vb = &b->optimizer.schedule.values;
  int eq = memcmp(x, y, offsetof(ts_config, source)) == 0 && strats_equal(&a->parallel.strategies, &b->parallel.strategies) &&
           strats_equal(&a->parallel.stages, &b->parallel.stages) && fa->n == fb->n &&
           (fa->n == 0 || !memcmp(fa->v, fb->v, sizeof(int) * (size_t)fa->n)) && va->n == vb->n &&
           (va->n == 0 || !memcmp(va->v, vb->v, sizeof(float) * (size_t)va->n)) && same_names && same_groups;
  free(x);
  free(y);
  return eq;
}

/* A non-default value for every key. */
static const struct {
  const char *key, *value;
} k_all[] = {
    {"device_target", "GPU"},
    {"device_id", "3"},
    {"float32_matmul_precision", "high"},
    {"model.name", "resnet"},
    {"model.num_classes", "100"},
    {"model.hidden", "[300, 200, 100]"},
    {"model.depth", "32"},
    {"model.cifar_stem", "false"},
    {"model.zero_init_residual", "true"},
    {"model.channels", "[16, 48]"},
    {"model.bn_momentum", "0.01"},
    {"model.bn_eps", "0.001"},
    {"model.label_smoothing", "0.1"},
    {"model.n_layer", "2"},
    {"model.n_head", "2"},
    {"model.n_embd", "64"},
    {"model.block_size", "64"},
    {"model.vocab_size", "512"},
    {"model.mlp_ratio", "2"},
    {"model.bias", "false"},
    {"model.tie_weights", "true"},
    {"model.dropout", "0.2"},
    {"model.recompute", "selective"},
    {"model.recompute_layers", "[\"transformer.h.*\", \"lm_head\"]"},
    {"data.name", "cifar100"},
    {"data.path", "/data/cifar 100 \"quoted\""},
    {"data.train_split", "train"},
    {"data.test_split", "test"},
    {"data.train_limit", "1000"},
    {"data.test_limit", "500"},
    {"data.val_fraction", "0.25"},
    {"data.seq_len", "64"},
    {"data.stride", "32"},
    {"data.transforms",
     "[{name: random_crop, size: 32, padding: 4}, {name: hflip}, {name: vflip, p: 0.25}, "
     "{name: resize, size: [36, 40]}, {name: center_crop, size: 32}, to_float, "
     "{name: normalize, mean: [0.5, 0.4, 0.3], std: [0.25, 0.2, 0.125]}, hwc_to_chw, "
     "{name: random_erasing, p: 0.3, scale: [0.05, 0.2], ratio: [0.5, 2]}, "
     "{name: cast, dtype: bf16}]"},
    {"data.test_transforms", "[{name: to_float, scale: 0.5, shift: -1}, {name: hwc_to_chw}]"},
    {"data.num_workers", "4"},
    {"data.shuffle", "false"},
    {"data.shuffle_buffer", "1024"},
    {"data.prefetch", "3"},
    {"data.drop_last", "false"},
    {"data.sampler", "stratified"},
    {"train.epochs", "15"},
    {"train.steps", "1000"},
    {"train.batch_size", "256"},
    {"train.micro_batch_size", "64"},
    {"train.eval_batch_size", "1000"},
    {"train.seed", "18446744073709551615"},
    {"train.eval_every", "200"},
    {"train.log_every", "10"},
    {"train.threads", "2"},
    {"train.max_memory_mb", "1536.5"},
    {"train.amp_level", "O2"},
    {"train.amp_dtype", "f16"},
    {"train.loss_scale", "fixed"},
    {"train.loss_scale_value", "4096"},
    {"train.loss_scale_factor", "4"},
    {"train.loss_scale_window", "100"},
    {"train.loss_scale_min", "0.5"},
    {"train.loss_scale_drop_overflow", "false"},
    {"train.restarts", "3"},
    {"optimizer.name", "adamw"},
    {"optimizer.lr", "0.003"},
    {"optimizer.momentum", "0.8"},
    {"optimizer.dampening", "0.1"},
    {"optimizer.nesterov", "false"}, /* the default; set to true separately below */
    {"optimizer.weight_decay", "0.05"},
    {"optimizer.betas", "[0.9, 0.95]"},
    {"optimizer.eps", "1e-6"},
    {"optimizer.exclude_bias_and_norm", "false"},
    {"optimizer.no_decay_params", "[\"fc.bias\", \"layer1.*.bn1.weight\"]"},
    {"optimizer.param_groups", "{\"fc*\": {lr_scale: 0.5, weight_decay: 0.25}, \"*.bias\": {lr_scale: 2.0}}"},
    {"optimizer.lamb_always_adapt", "true"},
    {"optimizer.clip_grad_norm", "1.5"},
    {"optimizer.schedule.name", "multistep"},
    {"optimizer.schedule.warmup_steps", "0"}, /* default; warmup_epochs is set instead */
    {"optimizer.schedule.warmup_epochs", "0.5"},
    {"optimizer.schedule.unit", "epochs"},
    {"optimizer.schedule.step_size", "7"},
    {"optimizer.schedule.gamma", "0.2"},
    {"optimizer.schedule.milestones", "[10, 20]"},
    {"optimizer.schedule.min_lr", "0.0001"},
    {"optimizer.schedule.values", "[0.5, 0.1, 1.0e-7]"}, /* read by schedule table only: kept all the same */
    {"parallel.mode", "semi_auto_parallel"},
    {"parallel.gradients_mean", "false"},
    {"parallel.bucket_size_mb", "0.5"},
    {"parallel.all_reduce_fusion_config", "[20, 35]"},
    {"parallel.device_num", "8"},
    {"parallel.comm_dtype", "bf16"},
    {"parallel.overlap", "false"},
    {"parallel.allreduce", "hierarchical"},
    {"parallel.reduce_scatter", "ring"},
    {"parallel.comm_backend", "mpi"},
    {"parallel.parameter_broadcast", "true"},
    {"parallel.sync_batchnorm", "true"},
    {"parallel.comm_timeout", "30"},
    {"parallel.debug_check", "true"},
    {"parallel.strategies", "{\"transformer.h.*.mlp.c_fc.dense\": \"((2,1,1),(2,1))\", \"fc\": \"((4,),)\"}"},
    {"parallel.strategy_ckpt_load_file", "in/strategy.json"},
    {"parallel.strategy_ckpt_save_file", "out/strategy.json"},
    {"parallel.full_batch", "true"},
    {"parallel.sequence_parallel", "true"},
    {"parallel.context_parallel", "2"},
    {"parallel.context_parallel_algo", "ring"},
    {"parallel.optimizer_shard", "1"},
    {"parallel.optimizer_shard_threshold_kb", "16"},
    {"parallel.optimizer_shard_group", "2"},
    {"parallel.optimizer_shard_weights", "f32"},
    {"parallel.enable_parallel_optimizer", "true"}, /* agrees with optimizer_shard 1 */
    {"parallel.cluster", "dgx-a100-80g"},
    {"parallel.search_mode", "sharding_propagation"},
    {"parallel.search_time_budget", "30"},
    {"parallel.auto_tp", "4"},
    {"parallel.pipeline_stages", "4"},
    {"parallel.micro_batches", "4"}, /* agrees with micro_batch_size 64 of 256 */
    {"parallel.pipeline_schedule", "interleaved_1f1b"},
    {"parallel.virtual_stages", "2"},
    {"parallel.stages", "{\"transformer.h.0\": \"0\", \"transformer.h.1\": \"1\"}"},
    {"checkpoint.dir", "runs/x"},
    {"checkpoint.prefix", "resnet"},
    {"checkpoint.save_steps", "500"},
    {"checkpoint.save_epochs", "2"},
    {"checkpoint.save_last", "false"},
    {"checkpoint.keep_max", "3"},
    {"checkpoint.resume", "auto"},
    {"checkpoint.strict", "false"},
    {"checkpoint.format", "sliced"},
    {"checkpoint.async", "true"},
    {"log.metrics", "runs/x/metrics.jsonl"},
    {"log.progress", "lines"},
    {"log.plot", "runs/x/curves.png"},
    {"log.plot_size", "1600x600"},
    {"log.level", "debug"},
    {"log.profile", "trace"},
    {"log.trace", "runs/x/trace.json"},
    {"log.profile_start", "6"},
    {"log.tensorboard", "runs/tb"},
};
#define NALL ((int)(sizeof k_all / sizeof k_all[0]))

static void test_defaults(void) {
  ts_config c;
  CHECK_OK(ts_config_load(NULL, NULL, 0, &c));
  CHECK(c.model.name == TS_MODEL_MLP);
  CHECK(c.model.num_classes == 10); /* resolved from fashion_mnist */
  CHECK(c.model.hidden.n == 2 && c.model.hidden.v[0] == 512 && c.model.hidden.v[1] == 256);
  CHECK(c.data.name == TS_DATA_FASHION_MNIST);
  CHECK(!strcmp(c.data.path, TS_FASHION_MNIST_DIR));
  CHECK(c.data.transforms.n == 2 && c.data.transforms.v[0].kind == TS_TF_TO_FLOAT &&
        c.data.transforms.v[0].scale == 1.0f / 255.0f &&
        c.data.transforms.v[1].kind == TS_TF_HWC_TO_CHW);
  CHECK(c.data.test_transforms.n == -1);
  CHECK(c.train.epochs == 5 && c.train.steps == 0 && c.train.batch_size == 128);
  CHECK(c.train.micro_batch_size == 128 && c.train.eval_batch_size == 128);
  CHECK(c.train.seed == 1);
  CHECK(c.optimizer.name == TS_OPTIM_MOMENTUM && c.optimizer.lr == 0.05);
  CHECK(c.optimizer.betas.n == 2 && c.optimizer.betas.v[1] == 0.999);
  CHECK(c.optimizer.schedule.name == TS_LR_CONSTANT);
  CHECK(c.parallel.mode == TS_PARALLEL_STAND_ALONE);
  CHECK(!strcmp(c.checkpoint.prefix, "ckpt") && c.checkpoint.keep_max == 5);
  CHECK(c.log.progress == TS_PROGRESS_AUTO && c.log.level == TS_LOG_INFO);
  /* every default parses on its own through the --set path */
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    CHECK_OK(ts_config_key_info(i, &k));
    CHECK_MSG(ts_config_set(&c, k.path, k.def) == TS_OK, "%s: %s", k.path, ts_last_error());
    CHECK_MSG(k.doc && *k.doc, "%s has no doc", k.path);
  }
  CHECK(ts_config_key_info(-1, &(ts_config_key){0}) == TS_ERANGE);
  /* enum names agree with optim.h's */
  for (int k = 0; k < TS_OPTIM_COUNT; k++) {
    char v[64];
    c.optimizer.name = (ts_optim_kind)k;
    CHECK_OK(ts_config_get(&c, "optimizer.name", v, sizeof v));
    CHECK(!strcmp(v, ts_optim_kind_name((ts_optim_kind)k)));
  }
  for (int k = 0; k < TS_LR_COUNT; k++) {
    char v[64];
    c.optimizer.schedule.name = (ts_lr_kind)k;
    CHECK_OK(ts_config_get(&c, "optimizer.schedule.name", v, sizeof v));
    CHECK(!strcmp(v, ts_lr_kind_name((ts_lr_kind)k)));
  }
  CHECK(!strcmp(ts_model_kind_name(TS_MODEL_GPT), "gpt"));
  CHECK(!strcmp(ts_data_kind_name(TS_DATA_IMAGE_FOLDER), "image_folder"));
  CHECK(!strcmp(ts_parallel_mode_name(TS_PARALLEL_HYBRID), "hybrid_parallel"));
  CHECK(!strcmp(ts_progress_mode_name(TS_PROGRESS_OFF), "off"));
  CHECK(!strcmp(ts_sched_unit_name(TS_SCHED_UNIT_EPOCHS), "epochs"));
  CHECK(!strcmp(ts_model_kind_name((ts_model_kind)99), "?"));
}

/* Applies k_all (without validation: model resnet + data cifar100 + ... are consistent). */
static void set_all(ts_config *c) {
  ts_config_defaults(c);
  for (int i = 0; i < NALL; i++)
    CHECK_MSG(ts_config_set(c, k_all[i].key, k_all[i].value) == TS_OK, "%s=%s: %s", k_all[i].key,
              k_all[i].value, ts_last_error());
  CHECK_OK(ts_config_set(c, "optimizer.name", "momentum"));
  CHECK_OK(ts_config_set(c, "optimizer.dampening", "0"));
  CHECK_OK(ts_config_set(c, "optimizer.nesterov", "yes"));
}

static void test_every_key_round_trips(void) {
  /* the table covers every key, and every value differs from the default */
  ts_config def, c;
  ts_config_defaults(&def);
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    ts_config_key_info(i, &k);
    int found = 0;
    for (int j = 0; j < NALL; j++) found |= !strcmp(k_all[j].key, k.path);
    CHECK_MSG(found, "key %s is not covered by the round-trip test", k.path);
  }
  set_all(&c);
  CHECK(c.optimizer.nesterov == 1);
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    ts_config_key_info(i, &k);
    char a[2048], b[2048];
    CHECK_OK(ts_config_get(&c, k.path, a, sizeof a));
    CHECK_OK(ts_config_get(&def, k.path, b, sizeof b));
    /* exclusive with warmup_epochs; nesterov needs momentum without dampening */
    if (!strcmp(k.path, "optimizer.schedule.warmup_steps") || !strcmp(k.path, "optimizer.name") ||
        !strcmp(k.path, "optimizer.dampening"))
      continue;
    CHECK_MSG(strcmp(a, b) != 0, "%s stays at its default %s", k.path, b);
  }
  CHECK(!strcmp(c.data.path, "/data/cifar 100 \"quoted\""));
  CHECK(c.data.transforms.n == 10);
  CHECK(c.data.transforms.v[0].kind == TS_TF_RANDOM_CROP && c.data.transforms.v[0].h == 32 &&
        c.data.transforms.v[0].pad == 4);
  CHECK(c.data.transforms.v[1].kind == TS_TF_HFLIP && c.data.transforms.v[1].p == 0.5f);
  CHECK(c.data.transforms.v[3].h == 36 && c.data.transforms.v[3].w == 40);
  CHECK(c.data.transforms.v[5].kind == TS_TF_TO_FLOAT);
  CHECK(c.data.transforms.v[6].nch == 3 && c.data.transforms.v[6].chw == 0 &&
        c.data.transforms.v[6].std[2] == 0.125f);
  CHECK(c.data.transforms.v[8].erase_scale[1] == 0.2f && c.data.transforms.v[8].erase_ratio[0] == 0.5f);
  CHECK(c.data.transforms.v[9].dtype == TS_BF16);
  CHECK(c.train.seed == UINT64_MAX);

  /* YAML: dump -> load gives the same struct */
  char *y;
  CHECK_OK(ts_config_dump_string(&c, &y));
  ts_config r;
  int rc = ts_config_load_string(y, "dump.yaml", NULL, 0, &r);
  CHECK_MSG(rc == TS_OK, "%s\n%s", ts_last_error(), y);
  CHECK_MSG(cfg_equal(&c, &r), "YAML round trip differs:\n%s", y);
  CHECK(!strcmp(r.source, "dump.yaml"));
  char *y2;
  CHECK_OK(ts_config_dump_string(&r, &y2));
  CHECK(!strcmp(y, y2));
  free(y2);
  ts_config_free(&r);
  /* ...and through a file and ts_config_dump_yaml */
  char path[] = "/tmp/ts_cfg_XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  CHECK_OK(ts_config_dump_yaml(&c, f));
  fclose(f);
  CHECK_OK(ts_config_load(path, NULL, 0, &r));
  CHECK(cfg_equal(&c, &r));
  ts_config_free(&r);
  unlink(path);
  free(y);

  /* --set: get(key) from c, set on a default config, key by key */
  ts_config s;
  ts_config_defaults(&s);
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    ts_config_key_info(i, &k);
    char v[2048], a[2100];
    CHECK_OK(ts_config_get(&c, k.path, v, sizeof v));
    snprintf(a, sizeof a, "%s=%s", k.path, v);
    CHECK_MSG(ts_config_override(&s, a) == TS_OK, "%s: %s", a, ts_last_error());
  }
  CHECK(cfg_equal(&c, &s));
  ts_config_free(&s);
  /* and the overrides through ts_config_load */
  const char *ov[NALL + 3];
  char buf[NALL][2100];
  for (int i = 0; i < NALL; i++) {
    snprintf(buf[i], sizeof buf[i], "%s=%s", k_all[i].key, k_all[i].value);
    ov[i] = buf[i];
  }
  ov[NALL] = "optimizer.name=momentum";
  ov[NALL + 1] = "optimizer.dampening=0";
  ov[NALL + 2] = "optimizer.nesterov=true";
  CHECK_OK(ts_config_load(NULL, ov, NALL + 3, &s));
  CHECK(cfg_equal(&c, &s));
  ts_config_free(&s);
  ts_config_free(&c);

  /* the default config round-trips too */
  ts_config d2;
  CHECK_OK(ts_config_load(NULL, NULL, 0, &def));
  CHECK_OK(ts_config_dump_string(&def, &y));
  CHECK_OK(ts_config_load_string(y, "d", NULL, 0, &d2));
  CHECK(cfg_equal(&def, &d2));
  CHECK(has(y, "model:\n  name: mlp\n"));
  CHECK(has(y, "optimizer:\n  name: momentum\n"));
  CHECK(has(y, "  schedule:\n    name: constant\n"));
  CHECK(has(y, "test_transforms: auto\n"));
  CHECK(has(y, "    - {name: to_float, scale: 0.003921569, shift: 0}\n"));
  CHECK(has(y, "  bn_eps: 1.0e-05\n"));
  free(y);
}

static void test_yaml_features(void) {
  ts_config c;
  /* sections, a dotted key, a block list, a flow section via --set, a whole-section override */
  const char *y =
      "# comment\n"
      "model:\n"
      "  name: convnet\n"
      "  channels:\n"
      "    - 8\n"
      "    - 16\n"
      "optimizer.lr: 0.5\n"
      "train: {epochs: 2, batch_size: 64}\n"
      "data:\n"
      "  transforms:\n"
      "    - to_float\n"
      "    - {name: normalize, mean: [0.2860], std: [0.3530]}\n"
      "    - hwc_to_chw\n"
      "    - {name: random_erasing, p: 0.25}\n"
      "checkpoint:\n"
      "  resume:\n";
  const char *ov[] = {"optimizer.schedule={name: cosine, warmup_steps: 10}", "model.hidden=64",
                      "data.path=/tmp/x y"};
  CHECK_OK(ts_config_load_string(y, "f.yaml", ov, 3, &c));
  CHECK(c.model.name == TS_MODEL_CONVNET && c.model.channels.v[1] == 16);
  CHECK(c.optimizer.lr == 0.5 && c.train.epochs == 2 && c.train.batch_size == 64);
  CHECK(c.optimizer.schedule.name == TS_LR_COSINE && c.optimizer.schedule.warmup_steps == 10);
  CHECK(c.model.hidden.n == 1 && c.model.hidden.v[0] == 64);
  CHECK(!strcmp(c.data.path, "/tmp/x y"));
  CHECK(c.data.transforms.n == 4 && c.data.transforms.v[1].chw == 0);
  CHECK(c.checkpoint.resume[0] == 0);
  /* empty file / empty document = defaults */
  ts_config d;
  CHECK_OK(ts_config_load_string("", "empty.yaml", NULL, 0, &c));
  CHECK_OK(ts_config_load(NULL, NULL, 0, &d));
  CHECK(cfg_equal(&c, &d));
  CHECK_OK(ts_config_load_string("---\n# nothing\n", "e2.yaml", NULL, 0, &c));
  /* normalize after hwc_to_chw is marked CHW */
  CHECK_OK(ts_config_load_string("data: {transforms: [to_float, hwc_to_chw, {name: normalize, "
                                 "mean: [0.5], std: [0.5]}]}", "n.yaml", NULL, 0, &c));
  CHECK(c.data.transforms.v[2].chw == 1);
  /* every transform after hwc_to_chw works on CHW, before it on HWC */
  CHECK_OK(ts_config_load_string("data: {transforms: [random_erasing, hflip, hwc_to_chw, "
                                 "{name: random_crop, size: 28}, random_erasing, to_float]}",
                                 "n.yaml", NULL, 0, &c));
  CHECK(c.data.transforms.v[0].chw == 0 && c.data.transforms.v[1].chw == 0 &&
        c.data.transforms.v[3].chw == 1 && c.data.transforms.v[4].chw == 1);
  /* transforms are what the data.h constructors make */
  {
    ts_transform a = ts_tf_random_erasing(0.5f), h = ts_tf_hflip(0.5f);
    a.chw = 0;
    CHECK(!memcmp(&c.data.transforms.v[0], &a, sizeof a));
    CHECK(!memcmp(&c.data.transforms.v[1], &h, sizeof h));
    ts_transform r = ts_tf_random_crop(28, 28, 0);
    r.chw = 1;
    CHECK(!memcmp(&c.data.transforms.v[3], &r, sizeof r));
    ts_transform f = ts_tf_to_float(1.0f / 255.0f);
    f.chw = 1;
    CHECK(!memcmp(&c.data.transforms.v[5], &f, sizeof f));
  }
  /* quoted strings, yes/no booleans, anchors */
  CHECK_OK(ts_config_load_string("log: {metrics: 'm.jsonl', plot: \"a\\tb.png\"}\n"
                                 "data: {shuffle: no, drop_last: Off}\n"
                                 "model: {hidden: &h [32, 32]}\n",
                                 "q.yaml", NULL, 0, &c));
  CHECK(!strcmp(c.log.metrics, "m.jsonl") && !strcmp(c.log.plot, "a\tb.png"));
  CHECK(c.data.shuffle == 0 && c.data.drop_last == 0 && c.model.hidden.n == 2);
  /* ts_config_set with a quoted string is unquoted; empty value clears */
  CHECK_OK(ts_config_set(&c, "log.metrics", "\"x y.jsonl\""));
  CHECK(!strcmp(c.log.metrics, "x y.jsonl"));
  CHECK_OK(ts_config_set(&c, "log.metrics", ""));
  CHECK(c.log.metrics[0] == 0);
  CHECK_OK(ts_config_set(&c, "model.hidden", "[]"));
  CHECK(c.model.hidden.n == 0);
  CHECK_OK(ts_config_set(&c, "data.test_transforms", "auto"));
  CHECK(c.data.test_transforms.n == -1);
  /* enum values are case-insensitive */
  CHECK_OK(ts_config_set(&c, "optimizer.name", "AdamW"));
  CHECK(c.optimizer.name == TS_OPTIM_ADAMW);
}

/* Loads yaml expecting TS_ECONFIG with every needle in the message. */
static void expect_err(const char *yaml, const char *const *ov, int n, const char *n1,
                       const char *n2, const char *n3) {
  ts_config c;
  int rc = ts_config_load_string(yaml, "bad.yaml", ov, n, &c);
  const char *m = ts_last_error();
  CHECK_MSG(rc == TS_ECONFIG, "expected TS_ECONFIG for <<%s>>, got %d (%s)", yaml, rc, m);
  CHECK_MSG(!n1 || has(m, n1), "message '%s' lacks '%s'", m, n1);
  CHECK_MSG(!n2 || has(m, n2), "message '%s' lacks '%s'", m, n2);
  CHECK_MSG(!n3 || has(m, n3), "message '%s' lacks '%s'", m, n3);
  CHECK_MSG(!strchr(m, '\n'), "message '%s' is not one line", m);
  ts_config_free(&c); /* what was loaded before the error */
}

static void test_errors(void) {
  /* unknown keys, with the closest valid name */
  expect_err("optimizer:\n  lrr: 0.1\n", NULL, 0, "bad.yaml:2:3:",
             "unknown key 'optimizer.lrr'", "(did you mean 'optimizer.lr'?)");
  expect_err("optimiser:\n  lr: 0.1\n", NULL, 0, "bad.yaml:1:1:", "unknown key 'optimiser'",
             "did you mean 'optimizer'?");
  expect_err("train:\n  lr: 0.1\n", NULL, 0, "unknown key 'train.lr'", "did you mean 'optimizer.lr'?",
             NULL);
  expect_err("optimizer:\n  schedule:\n    warmup: 5\n", NULL, 0, "bad.yaml:3:5:",
             "did you mean 'optimizer.schedule.warmup_steps'?", NULL);
  expect_err("model:\n  zzzz: 1\n", NULL, 0, "unknown key 'model.zzzz'",
             "valid keys in 'model': name, num_classes", NULL);
  expect_err("train:\n  epochs: 3\n  epochs: 4\n", NULL, 0, "bad.yaml:3:3:",
             "duplicate key 'train.epochs' (first at line 2)", NULL);
  /* wrong types */
  expect_err("train:\n  epochs: ten\n", NULL, 0, "bad.yaml:2:11:",
             "train.epochs: expected an integer, got 'ten'", NULL);
  expect_err("train:\n  epochs: 1.5\n", NULL, 0, "train.epochs: expected an integer, got '1.5'",
             NULL, NULL);
  expect_err("optimizer:\n  lr: fast\n", NULL, 0, "optimizer.lr: expected a number, got 'fast'",
             NULL, NULL);
  expect_err("optimizer:\n  lr: '0.1'\n", NULL, 0, "optimizer.lr: expected a number, got '0.1'",
             NULL, NULL);
  expect_err("data:\n  shuffle: maybe\n", NULL, 0, "data.shuffle: expected true or false", NULL,
             NULL);
  expect_err("train: 5\n", NULL, 0, "train: expected a mapping of keys (a section), got '5'",
             NULL, NULL);
  expect_err("model:\n  hidden: {a: 1}\n", NULL, 0, "model.hidden: expected a list of integers",
             NULL, NULL);
  expect_err("model:\n  hidden: [512, x]\n", NULL, 0, "model.hidden[1]: expected an integer, got 'x'",
             NULL, NULL);
  expect_err("data:\n  path: [a]\n", NULL, 0, "data.path: expected a string, got a list", NULL,
             NULL);
  expect_err("train:\n  seed: -1\n", NULL, 0, "train.seed: expected a non-negative integer", NULL,
             NULL);
  expect_err("[1, 2]\n", NULL, 0, "expected a mapping of sections", NULL, NULL);
  /* out of range */
  expect_err("train:\n  batch_size: 0\n", NULL, 0, "train.batch_size: 0 is out of range", NULL,
             NULL);
  expect_err("optimizer:\n  momentum: 1.0\n", NULL, 0, "optimizer.momentum: 1 is out of range",
             "0 <= value < 1", NULL);
  expect_err("optimizer:\n  betas: [0.9]\n", NULL, 0, "optimizer.betas: expected 2 values, got 1",
             NULL, NULL);
  expect_err("model:\n  channels: [1, 2, 3]\n", NULL, 0, "model.channels: expected 2 values",
             NULL, NULL);
  /* bad enum values, listing the valid ones */
  expect_err("model:\n  name: resnt\n", NULL, 0, "bad.yaml:2:9: model.name: unknown value 'resnt'",
             "did you mean 'resnet'?", "expected one of: mlp, lenet5, convnet, resnet, gpt");
  expect_err("parallel:\n  mode: pipeline\n", NULL, 0, "parallel.mode: unknown value 'pipeline'",
             "stand_alone, data_parallel, semi_auto_parallel, auto_parallel, hybrid_parallel",
             NULL);
  expect_err("optimizer:\n  name: rmsprop\n", NULL, 0, "sgd, momentum, adam, adamw, lamb", NULL,
             NULL);
  /* malformed YAML, with line and column and the parser's problem */
  expect_err("model:\n  name: mlp\n  hidden: [1, 2\ntrain:\n", NULL, 0, "bad.yaml:4:",
             "malformed YAML", NULL);
  expect_err("model:\n\tname: mlp\n", NULL, 0, "bad.yaml:2:", "malformed YAML",
             "found character that cannot start any token");
  expect_err("model:\n  name: mlp\n---\ntrain: {}\n", NULL, 0, "bad.yaml:4:",
             "a second YAML document", NULL);
  /* transforms */
  expect_err("data:\n  transforms: [{name: rotate}]\n", NULL, 0,
             "data.transforms[0].name: unknown value 'rotate'", "random_crop, center_crop", NULL);
  expect_err("data:\n  transforms: [{name: random_crop, size: 28, paddin: 2}]\n", NULL, 0,
             "data.transforms[0] (random_crop): unknown parameter 'paddin'",
             "did you mean 'padding'?", NULL);
  expect_err("data:\n  transforms: [{name: hwc_to_chw, p: 1}]\n", NULL, 0,
             "(hwc_to_chw takes none)", NULL, NULL);
  expect_err("data:\n  transforms: [{name: center_crop}]\n", NULL, 0,
             "data.transforms[0] (center_crop): missing parameter 'size'", NULL, NULL);
  expect_err("data:\n  transforms: [{size: 3}]\n", NULL, 0, "data.transforms[0]: missing 'name'",
             NULL, NULL);
  expect_err("data:\n  transforms: [to_float, {name: normalize, mean: [0.5, 0.5], std: [1]}]\n",
             NULL, 0, "mean has 2 values but std has 1", NULL, NULL);
  expect_err("data:\n  transforms: [{name: normalize, mean: [0.5], std: [0.5]}]\n", NULL, 0,
             "bad.yaml: data.transforms[0] (normalize): needs float samples", NULL, NULL);
  expect_err("data:\n  transforms: [to_float, {name: normalize, mean: [0.5, 0.5, 0.5], std: [1, "
             "1, 1]}]\n",
             NULL, 0, "data.name 'fashion_mnist' has 1 channel", NULL, NULL);
  expect_err("data:\n  transforms: [{name: hflip, p: 2}]\n", NULL, 0,
             "data.transforms[0].p: 2 is out of range", NULL, NULL);
  expect_err("data:\n  transforms: auto\n", NULL, 0,
             "data.transforms: expected a list of transforms, got 'auto'", NULL, NULL);
  expect_err("data:\n  transforms: [{name: cast, dtype: f8}]\n", NULL, 0, "unknown dtype 'f8'",
             NULL, NULL);
  /* cross-key checks */
  expect_err("train:\n  batch_size: 100\n  micro_batch_size: 32\n", NULL, 0,
             "bad.yaml: train.batch_size (100) must be divisible by train.micro_batch_size (32)",
             NULL, NULL);
  expect_err("train: {batch_size: 16, micro_batch_size: 32}\n", NULL, 0,
             "train.micro_batch_size (32) is larger than train.batch_size (16)", NULL, NULL);
  expect_err("train: {epochs: 0}\n", NULL, 0, "train.epochs and train.steps are both 0", NULL,
             NULL);
  expect_err("optimizer: {name: adam, nesterov: true}\n", NULL, 0,
             "optimizer.nesterov: only for optimizer.name 'momentum'", NULL, NULL);
  expect_err("optimizer: {schedule: {name: step}}\n", NULL, 0,
             "optimizer.schedule.step_size: must be > 0", NULL, NULL);
  expect_err("optimizer: {schedule: {name: multistep, milestones: [20, 10]}}\n", NULL, 0,
             "milestones: must increase", NULL, NULL);
  expect_err("optimizer: {schedule: {warmup_steps: 5, warmup_epochs: 1}}\n", NULL, 0,
             "set warmup_steps or warmup_epochs, not both", NULL, NULL);
  expect_err("optimizer: {lr: 0.1, schedule: {min_lr: 0.2}}\n", NULL, 0,
             "min_lr (0.2) is larger than optimizer.lr (0.1)", NULL, NULL);
  expect_err("model: {name: gpt}\n", NULL, 0, "model.name 'gpt' needs data.name 'text'", NULL,
             NULL);
  expect_err("data: {name: text, path: t.txt}\n", NULL, 0, "data.name 'text' needs model.name 'gpt'",
             NULL, NULL);
  expect_err("model: {name: gpt, n_embd: 100, n_head: 3}\ndata: {name: text, path: t.txt}\n",
             NULL, 0, "model.n_embd (100) must be divisible by model.n_head (3)", NULL, NULL);
  expect_err("model: {name: gpt, block_size: 64}\ndata: {name: text, path: t, seq_len: 128}\n",
             NULL, 0, "model.block_size (64) is smaller than data.seq_len (128)", NULL, NULL);
  expect_err("model: {name: resnet, depth: 21}\n", NULL, 0, "model.depth: 21 is not a ResNet depth",
             NULL, NULL);
  expect_err("model: {num_classes: 100}\n", NULL, 0,
             "model.num_classes (100) does not match data.name 'fashion_mnist' (10 classes)", NULL,
             NULL);
  expect_err("data: {name: cifar10}\n", NULL, 0, "data.path: required for data.name 'cifar10'",
             NULL, NULL);
  expect_err("checkpoint: {resume: auto}\n", NULL, 0, "checkpoint.resume: 'auto' needs checkpoint.dir",
             NULL, NULL);
  expect_err("checkpoint: {prefix: a/b}\n", NULL, 0, "checkpoint.prefix", NULL, NULL);
  /* recompute patterns without recompute would be ignored: an error naming both keys, with the fix */
  expect_err("model: {recompute_layers: ['transformer.h.*']}\n", NULL, 0,
             "model.recompute_layers is given (1 pattern, first 'transformer.h.*')", "model.recompute is none",
             "set model.recompute: full");
  const char *o7[] = {"model.recompute=none"};
  expect_err("model: {recompute: full, recompute_layers: [a, b]}\n", o7, 1, "model.recompute_layers is given (2 patterns",
             "model.recompute is none", NULL);
  /* pipeline keys: each refusal names its key */
  expect_err("parallel: {micro_batches: 4}\n", NULL, 0, "parallel.micro_batches: set for a pipeline", NULL, NULL);
  expect_err("parallel: {pipeline_stages: 2, virtual_stages: 2}\n", NULL, 0,
             "parallel.virtual_stages: 2 pieces per rank need parallel.pipeline_schedule interleaved_1f1b", NULL, NULL);
  expect_err("parallel: {stages: {transformer.h.0: 0}}\n", NULL, 0, "parallel.stages: given, but", NULL, NULL);
  expect_err("parallel: {pipeline_stages: 2, stages: {transformer.h.0: first}}\n", NULL, 0,
             "parallel.stages.transformer.h.0: expected a stage number", NULL, NULL);
  expect_err("train: {batch_size: 32}\nparallel: {pipeline_stages: 2, micro_batches: 5}\n", NULL, 0,
             "parallel.micro_batches (5) must divide train.batch_size (32)", NULL, NULL);
  /* enable_parallel_optimizer (optimizer_shard's alias) disagreeing with it: both keys named */
  expect_err("parallel: {enable_parallel_optimizer: false, optimizer_shard: 1}\n", NULL, 0,
             "parallel.enable_parallel_optimizer: false disagrees with parallel.optimizer_shard: 1", "set one of them",
             NULL);
  expect_err("parallel: {enable_parallel_optimizer: true, optimizer_shard: off}\n", NULL, 0,
             "parallel.enable_parallel_optimizer: true disagrees with parallel.optimizer_shard: off", NULL, NULL);
  const char *o8[] = {"parallel.optimizer_shard=off"};
  expect_err("parallel:\n  enable_parallel_optimizer: true\n", o8, 1, "parallel.enable_parallel_optimizer: true",
             "parallel.optimizer_shard: off", NULL);
  expect_err("train: {max_memory_mb: -1}\n", NULL, 0, "train.max_memory_mb: -1 is out of range", NULL, NULL);
  /* --set errors name the override */
  const char *o1[] = {"train.epochs=ten"};
  expect_err("", o1, 1, "--set train.epochs=ten: train.epochs: expected an integer, got 'ten'",
             NULL, NULL);
  const char *o2[] = {"optimizer.lrr=0.1"};
  expect_err("", o2, 1, "--set optimizer.lrr=0.1: unknown key 'optimizer.lrr'",
             "did you mean 'optimizer.lr'?", NULL);
  const char *o3[] = {"optimizer.lr"};
  expect_err("", o3, 1, "--set optimizer.lr: expected key.path=value", NULL, NULL);
  const char *o4[] = {"optimizer.betas=[0.9"};
  expect_err("", o4, 1, "--set optimizer.betas=[0.9: malformed value", NULL, NULL);
  const char *o5[] = {"model.name=vit"};
  expect_err("", o5, 1, "model.name: unknown value 'vit'", "expected one of:", NULL);
  const char *o6[] = {"model={name: mlp, hiden: [3]}"};
  expect_err("", o6, 1, "unknown key 'model.hiden'", "did you mean 'model.hidden'?", NULL);
  /* missing file */
  ts_config c;
  CHECK(ts_config_load("/nonexistent/x.yaml", NULL, 0, &c) == TS_ECONFIG);
  CHECK(has(ts_last_error(), "/nonexistent/x.yaml: cannot read the config"));
  /* ts_config_get errors */
  char buf[8];
  CHECK(ts_config_get(&c, "optimizer.lrr", buf, sizeof buf) == TS_ECONFIG);
  CHECK(has(ts_last_error(), "did you mean 'optimizer.lr'?"));
  CHECK(ts_config_get(&c, "data.transforms", buf, sizeof buf) == TS_ERANGE);
  /* too-long string */
  char longv[2000];
  memset(longv, 'a', sizeof longv - 1);
  longv[sizeof longv - 1] = 0;
  CHECK(ts_config_set(&c, "data.path", longv) == TS_ECONFIG);
  CHECK(has(ts_last_error(), "data.path: too long"));
}

/* parallel.enable_parallel_optimizer, MindSpore's name for optimizer_shard: alone it decides, with
 * optimizer_shard they agree, afterwards it mirrors optimizer_shard (so dumps load again). */
static void test_alias(void) {
  ts_config c, r;
  CHECK_OK(ts_config_load_string("parallel: {mode: data_parallel, enable_parallel_optimizer: true}\n", "a.yaml", NULL,
                                 0, &c));
  CHECK(c.parallel.optimizer_shard == 1 && c.parallel.enable_parallel_optimizer == 1);
  CHECK(ts_config_given(&c, "parallel.enable_parallel_optimizer") && !ts_config_given(&c, "parallel.optimizer_shard"));
  CHECK(!ts_config_given(&c, "train.epochs") && !ts_config_given(&c, "no.such.key"));
  CHECK_OK(ts_config_validate(&c)); /* idempotent */
  CHECK(c.parallel.optimizer_shard == 1);
  /* true with a stage: the stage (MindSpore's switch + optimizer level) */
  CHECK_OK(ts_config_load_string("parallel: {enable_parallel_optimizer: true, optimizer_shard: 2}\n", "a.yaml", NULL,
                                 0, &c));
  CHECK(c.parallel.optimizer_shard == 2 && c.parallel.enable_parallel_optimizer == 1);
  char *y;
  CHECK_OK(ts_config_dump_string(&c, &y));
  CHECK(has(y, "  optimizer_shard: 2\n") && has(y, "  enable_parallel_optimizer: true\n"));
  CHECK_OK(ts_config_load_string(y, "dump.yaml", NULL, 0, &r));
  CHECK(cfg_equal(&c, &r));
  free(y);
  /* false alone: off; the stage alone mirrors into the alias; --set of the alias over a file */
  CHECK_OK(ts_config_load_string("parallel: {enable_parallel_optimizer: false}\n", "a.yaml", NULL, 0, &c));
  CHECK(c.parallel.optimizer_shard == 0 && c.parallel.enable_parallel_optimizer == 0);
  CHECK_OK(ts_config_load_string("parallel: {optimizer_shard: 2}\n", "a.yaml", NULL, 0, &c));
  CHECK(c.parallel.enable_parallel_optimizer == 1);
  CHECK_OK(ts_config_dump_string(&c, &y));
  CHECK_OK(ts_config_load_string(y, "dump.yaml", NULL, 0, &r));
  CHECK(cfg_equal(&c, &r));
  free(y);
  const char *ov[] = {"parallel.enable_parallel_optimizer=true"};
  CHECK_OK(ts_config_load_string("parallel: {mode: data_parallel}\n", "a.yaml", ov, 1, &c));
  CHECK(c.parallel.optimizer_shard == 1);
  /* a program setting the fields directly (nothing given): the alias still turns sharding on */
  ts_config_defaults(&c);
  c.parallel.enable_parallel_optimizer = 1;
  CHECK_OK(ts_config_validate(&c));
  CHECK(c.parallel.optimizer_shard == 1);
  /* the budget key */
  const char *ov2[] = {"train.max_memory_mb=512"};
  CHECK_OK(ts_config_load(NULL, ov2, 1, &c));
  CHECK(c.train.max_memory_mb == 512 && ts_config_given(&c, "train.max_memory_mb"));
}

static void test_hash(void) {
  ts_config a, b;
  CHECK_OK(ts_config_load(NULL, NULL, 0, &a));
  uint64_t h0 = ts_config_hash(&a);
  CHECK(h0 == ts_config_hash(&a));
  /* a file spelling out the defaults hashes the same as no file */
  char *y;
  CHECK_OK(ts_config_dump_string(&a, &y));
  CHECK_OK(ts_config_load_string(y, "x.yaml", NULL, 0, &b));
  CHECK(ts_config_hash(&b) == h0);
  free(y);
  /* not training-relevant: unchanged */
  const char *same[] = {"log.metrics=m.jsonl", "data.num_workers=7", "checkpoint.dir=ck",
                        "train.micro_batch_size=32", "parallel.mode=data_parallel",
                        "train.eval_every=100", "data.path=/elsewhere", "log.progress=off",
                        "train.threads=1", "checkpoint.keep_max=1"};
  for (int i = 0; i < (int)(sizeof same / sizeof same[0]); i++) {
    CHECK_OK(ts_config_load(NULL, &same[i], 1, &b));
    CHECK_MSG(ts_config_hash(&b) == h0, "%s changed the hash", same[i]);
  }
  /* training-relevant: changed, and each differently */
  const char *diff[] = {"optimizer.lr=0.1", "model.hidden=[512, 128]", "train.seed=2",
                        "train.batch_size=64", "train.epochs=6", "optimizer.name=adamw",
                        "data.transforms=[to_float]", "optimizer.schedule.name=cosine",
                        "model.name=lenet5", "data.shuffle=false"};
  uint64_t hs[16];
  int nd = (int)(sizeof diff / sizeof diff[0]);
  for (int i = 0; i < nd; i++) {
    CHECK_OK(ts_config_load(NULL, &diff[i], 1, &b));
    hs[i] = ts_config_hash(&b);
    CHECK_MSG(hs[i] != h0, "%s did not change the hash", diff[i]);
    for (int j = 0; j < i; j++) CHECK(hs[i] != hs[j]);
  }
  /* stable across runs and builds: a fixed value for a fixed config */
  const char *pin[] = {"optimizer.lr=0.1"};
  CHECK_OK(ts_config_load(NULL, pin, 1, &b));
  uint64_t expect = 1469598103934665603ULL;
  const char *txt = "tessera-config-hash-v1\noptimizer.lr=0.1\n";
  for (const char *s = txt; *s; s++) expect = (expect ^ (unsigned char)*s) * 1099511628211ULL;
  CHECK(ts_config_hash(&b) == expect);
}

static void test_conversions(void) {
  ts_config c;
  const char *ov[] = {"optimizer.name=adamw", "optimizer.weight_decay=0.05",
                      "optimizer.betas=[0.8, 0.95]", "optimizer.eps=1e-7",
                      "optimizer.schedule={name: multistep, unit: epochs, milestones: [2, 4], "
                      "gamma: 0.5, warmup_epochs: 0.5}",
                      "train.epochs=6"};
  CHECK_OK(ts_config_load(NULL, ov, 6, &c));
  ts_optim_config oc;
  CHECK_OK(ts_config_optim(&c, &oc));
  CHECK(oc.kind == TS_OPTIM_ADAMW && oc.weight_decay == 0.05 && oc.beta1 == 0.8 &&
        oc.beta2 == 0.95 && oc.eps == 1e-7);
  ts_lr_schedule s;
  CHECK_OK(ts_config_lr_schedule(&c, 100, &s));
  CHECK(s.kind == TS_LR_MULTISTEP && s.nmilestones == 2 && s.milestones[0] == 200 &&
        s.milestones[1] == 400 && s.warmup_steps == 50 && s.total_steps == 600 && s.gamma == 0.5);
  CHECK(ts_lr_at(&s, 25) == 0.5f * 0.05f);
  CHECK(ts_lr_at(&s, 300) == (float)(0.05 * 0.5));
  CHECK(ts_config_total_steps(&c, 100) == 600);
  CHECK_OK(ts_config_set(&c, "train.steps", "77"));
  CHECK(ts_config_total_steps(&c, 100) == 77);
  CHECK(ts_config_lr_schedule(&c, 0, &s) == TS_ECONFIG);
  /* a warm-up longer than the run (a run shortened by --set train.steps): clipped to the run, with
   * one warning naming the source, both key paths and the values (it was refused before) */
  const char *ov2[] = {"optimizer.schedule={name: cosine, warmup_steps: 1000}", "train.epochs=1"};
  CHECK_OK(ts_config_load(NULL, ov2, 2, &c));
  warn_capture_start();
  CHECK_OK(ts_config_lr_schedule(&c, 10, &s));
  warn_capture_stop();
  CHECK(s.warmup_steps == 10 && s.total_steps == 10);
  CHECK(ts_lr_at(&s, 5) == (float)(s.base_lr * 5 / 10));
  CHECK_MSG(g_nwarn == 1 && has(g_warn, "optimizer.schedule (cosine): optimizer.schedule.warmup_steps 1000 is longer "
                                "than the run (train.epochs 1 x 10 steps per epoch = 10 steps): the warm-up is clipped "
                                "to the run's 10 steps"),
            "%d: %s", g_nwarn, g_warn);
  /* an epoch-based warm-up under --set train.steps=3, any schedule */
  const char *ov2b[] = {"optimizer.schedule={name: step, step_size: 100, warmup_epochs: 2}", "train.steps=3"};
  CHECK_OK(ts_config_load(NULL, ov2b, 2, &c));
  warn_capture_start();
  CHECK_OK(ts_config_lr_schedule(&c, 10, &s));
  warn_capture_stop();
  CHECK(s.warmup_steps == 3);
  CHECK_MSG(g_nwarn == 1 && has(g_warn, "optimizer.schedule (step): optimizer.schedule.warmup_epochs 2 x 10 steps per "
                                "epoch = 20 warm-up steps is longer than the run (train.steps 3): the warm-up is "
                                "clipped to the run's 3 steps"),
            "%d: %s", g_nwarn, g_warn);
  /* a warm-up within the run: as configured, nothing said */
  CHECK_OK(ts_config_set(&c, "train.steps", "20"));
  warn_capture_start();
  CHECK_OK(ts_config_lr_schedule(&c, 10, &s));
  warn_capture_stop();
  CHECK(s.warmup_steps == 20 && g_nwarn == 0);
  /* warmup_steps larger than --set train.steps under cosine: loads, and is clipped */
  const char *ov2c[] = {"optimizer.schedule={name: cosine, warmup_steps: 10}", "train.steps=3"};
  CHECK_MSG(ts_config_load(NULL, ov2c, 2, &c) == TS_OK, "%s", ts_last_error());
  warn_capture_start();
  CHECK_OK(ts_config_lr_schedule(&c, 10, &s));
  warn_capture_stop();
  CHECK(s.warmup_steps == 3 && g_nwarn == 1 &&
        has(g_warn, "optimizer.schedule.warmup_steps 10 is longer than the run (train.steps 3): the warm-up is "
                    "clipped to the run's 3 steps"));

  /* schedule table: one rate per step, kept as f32 (MindSpore's list / 1-D Tensor learning_rate) */
  const char *ov2d[] = {"optimizer.schedule={name: table, values: [0.1, 0.05, 0.1000000001, 3.0e-5]}", "train.steps=4"};
  CHECK_OK(ts_config_load(NULL, ov2d, 2, &c));
  CHECK_OK(ts_config_lr_schedule(&c, 10, &s));
  CHECK(s.kind == TS_LR_TABLE && s.ntable == 4 && s.table == c.optimizer.schedule.values.v);
  CHECK(ts_lr_at(&s, 0) == 0.1f && ts_lr_at(&s, 1) == 0.05f && ts_lr_at(&s, 2) == 0.1f && ts_lr_at(&s, 3) == 3.0e-5f);
  CHECK(ts_lr_at(&s, 9) == 3.0e-5f); /* past the table: its last rate (ts_lr_at's contract) */
  {
    char *y = NULL; /* the dump reloads to the same f32 rates */
    ts_config r;
    CHECK_OK(ts_config_dump_string(&c, &y));
    CHECK(y && has(y, "values: [0.1, 0.05, 0.1, 3.0e-05]"));
    CHECK_OK(ts_config_load_string(y, "dump", NULL, 0, &r));
    CHECK(cfg_equal(&c, &r));
    ts_config_free(&r);
    free(y);
  }
  CHECK_OK(ts_config_set(&c, "train.steps", "5")); /* a run longer than the table: refused, both numbers */
  CHECK(ts_config_lr_schedule(&c, 10, &s) == TS_ECONFIG);
  CHECK_MSG(has(ts_last_error(), "optimizer.schedule.values: 4 rates for a run of 5 steps (train.steps 5): give one "
                                 "rate per step"), "%s", ts_last_error());
  CHECK_OK(ts_config_set(&c, "train.steps", "0"));
  CHECK_OK(ts_config_set(&c, "train.epochs", "1"));
  CHECK(ts_config_lr_schedule(&c, 8, &s) == TS_ECONFIG && has(ts_last_error(), "(train.epochs 1 x 8 steps per epoch)"));
  ts_config_free(&c); /* it owns the table: freed before reloading (config.h), also after a failed load */
  const char *ov2e[] = {"optimizer.schedule={name: table}"};
  CHECK(ts_config_load(NULL, ov2e, 1, &c) == TS_ECONFIG && has(ts_last_error(), "optimizer.schedule.values: needed"));
  ts_config_free(&c);
  const char *ov2f[] = {"optimizer.schedule={name: table, values: [0.1], warmup_steps: 3}"};
  CHECK(ts_config_load(NULL, ov2f, 1, &c) == TS_ECONFIG && has(ts_last_error(), "warm-up included"));
  ts_config_free(&c);
  const char *ov2g[] = {"optimizer.schedule={name: table, values: [0.1, -1]}"};
  CHECK(ts_config_load(NULL, ov2g, 1, &c) == TS_ECONFIG && has(ts_last_error(), "optimizer.schedule.values[1]"));
  ts_config_free(&c);

  /* parameter groups: a mapping of patterns to their lr factor and weight decay (defaults 1 and the
   * optimizer's: -1), in order; the dump reloads to the same groups; bad entries refused naming them */
  const char *ov2h[] = {"optimizer.param_groups={\"layer1.*\": {lr_scale: 0.1}, head.weight: {weight_decay: 0, lr_scale: 10}, "
                        "\"*.bias\": {}}"};
  CHECK_MSG(ts_config_load(NULL, ov2h, 1, &c) == TS_OK, "%s", ts_last_error());
  {
    const ts_cfg_pgroups *g = &c.optimizer.param_groups;
    CHECK(g->n == 3 && !strcmp(g->v[0].pattern, "layer1.*") && g->v[0].lr_scale == 0.1 && g->v[0].weight_decay == -1.0 &&
          !strcmp(g->v[1].pattern, "head.weight") && g->v[1].lr_scale == 10 && g->v[1].weight_decay == 0 &&
          !strcmp(g->v[2].pattern, "*.bias") && g->v[2].lr_scale == 1 && g->v[2].weight_decay == -1.0);
    char buf[256], *y = NULL;
    CHECK_OK(ts_config_get(&c, "optimizer.param_groups", buf, sizeof buf));
    CHECK_MSG(!strcmp(buf, "{\"layer1.*\": {lr_scale: 0.1}, \"head.weight\": {lr_scale: 1.0e+01, weight_decay: 0}, "
                           "\"*.bias\": {lr_scale: 1}}"), "%s", buf);
    ts_config r, cp;
    CHECK_OK(ts_config_dump_string(&c, &y));
    CHECK_OK(ts_config_load_string(y, "dump", NULL, 0, &r));
    CHECK(cfg_equal(&c, &r));
    CHECK_OK(ts_config_copy(&cp, &c));
    CHECK(cfg_equal(&c, &cp) && cp.optimizer.param_groups.v != c.optimizer.param_groups.v);
    uint64_t h = ts_config_hash(&c); /* a training key: in the hash */
    CHECK_OK(ts_config_set(&cp, "optimizer.param_groups", "{}"));
    CHECK(cp.optimizer.param_groups.n == 0 && ts_config_hash(&cp) != h);
    ts_config_free(&cp);
    ts_config_free(&r);
    free(y);
  }
  ts_config_free(&c);
  static const struct {
    const char *set, *err;
  } bad_groups[] = {
      {"optimizer.param_groups=[a, b]", "optimizer.param_groups: expected a mapping of parameter names"},
      {"optimizer.param_groups={a: 0.1}", "optimizer.param_groups.'a': expected {lr_scale: X, weight_decay: Y}"},
      {"optimizer.param_groups={a: {lr: 0.1}}", "optimizer.param_groups.'a': unknown field 'lr' (expected lr_scale, weight_decay)"},
      {"optimizer.param_groups={a: {lr_scale: -1}}", "optimizer.param_groups.'a'.lr_scale"},
      {"optimizer.param_groups={a: {weight_decay: x}}", "optimizer.param_groups.'a'.weight_decay"},
      {"optimizer.param_groups={a: {lr_scale: 1}, a: {lr_scale: 2}}", "optimizer.param_groups: 'a' appears twice"},
  };
  for (size_t i = 0; i < sizeof bad_groups / sizeof bad_groups[0]; i++) {
    CHECK(ts_config_load(NULL, &bad_groups[i].set, 1, &c) == TS_ECONFIG);
    CHECK_MSG(has(ts_last_error(), bad_groups[i].err), "%s: %s", bad_groups[i].set, ts_last_error());
    ts_config_free(&c);
  }

  /* transforms: training list as given, evaluation list "auto" without the random ones */
  const char *ov3[] = {"data.transforms=[{name: random_crop, size: 28, padding: 2}, hflip, "
                       "to_float, {name: normalize, mean: [0.5], std: [0.5]}, hwc_to_chw, "
                       "random_erasing]"};
  CHECK_OK(ts_config_load(NULL, ov3, 1, &c));
  ts_transform t[16];
  CHECK(ts_config_transforms(&c, 1, t, 16) == 6);
  int n = ts_config_transforms(&c, 0, t, 16);
  CHECK(n == 3 && t[0].kind == TS_TF_TO_FLOAT && t[1].kind == TS_TF_NORMALIZE &&
        t[2].kind == TS_TF_HWC_TO_CHW);
  CHECK(ts_config_transforms(&c, 1, t, 2) == TS_ERANGE);
  CHECK_OK(ts_config_set(&c, "data.test_transforms", "[to_float]"));
  CHECK(ts_config_transforms(&c, 0, t, 16) == 1);

  /* model configs */
  const char *ov4[] = {"model={name: resnet, depth: 18, cifar_stem: false, zero_init_residual: "
                       "true}", "data={name: cifar100, path: /d}"};
  CHECK_OK(ts_config_load(NULL, ov4, 2, &c));
  ts_resnet_config rc;
  ts_config_resnet(&c, &rc);
  CHECK(rc.depth == 18 && rc.num_classes == 100 && rc.cifar == 0 && rc.zero_init_residual == 1 &&
        rc.bn_momentum == 0.1f && rc.bn_eps == 1e-5f);
  ts_mlp_config mc;
  ts_config_mlp(&c, &mc);
  CHECK(mc.nhidden == 2 && mc.hidden[0] == 512 && mc.num_classes == 100);
  ts_convnet_config cc;
  ts_config_convnet(&c, &cc);
  CHECK(cc.c1 == 32 && cc.c2 == 64);
  ts_lenet5_config lc;
  ts_config_lenet5(&c, &lc);
  CHECK(lc.num_classes == 100);
  const char *ov5[] = {"model={name: gpt, n_layer: 2, n_head: 2, n_embd: 32, bias: false}",
                       "data={name: text, path: /t.txt, seq_len: 64}", "train.seed=9"};
  CHECK_OK(ts_config_load(NULL, ov5, 3, &c));
  ts_gpt_config gc;
  ts_config_gpt(&c, &gc);
  CHECK(gc.n_layer == 2 && gc.n_embd == 32 && gc.block_size == 64 && gc.vocab_size == 256 &&
        gc.no_bias == 1 && gc.dropout_seed == 9);
}

/* Every example loads and validates; every key is documented. */
static void test_examples_and_docs(void) {
  DIR *d = opendir(REPO_DIR "/examples");
  CHECK(d != NULL);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 6 || strcmp(e->d_name + l - 5, ".yaml")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/examples/%s", REPO_DIR, e->d_name);
    ts_config c;
    CHECK_MSG(ts_config_load(p, NULL, 0, &c) == TS_OK, "%s", ts_last_error());
    ts_config_free(&c);
    n++;
  }
  if (d) closedir(d);
  CHECK(n >= 6);
  FILE *f = fopen(REPO_DIR "/docs/config.md", "rb");
  CHECK(f != NULL);
  if (!f) return;
  static char doc[1 << 18];
  size_t len = fread(doc, 1, sizeof doc - 1, f);
  doc[len] = 0;
  fclose(f);
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    ts_config_key_info(i, &k);
    char want[300];
    snprintf(want, sizeof want, "`%s`", k.path);
    CHECK_MSG(has(doc, want), "docs/config.md does not document %s", k.path);
  }
}

/* Lists of any length (issue 19): 600 strategies, 40 fusion split points, 300 stage rules load
 * from a file; the config owns them (ts_config_copy gives an independent copy that outlives the
 * original, ts_config_set replaces a list and frees the old one, ts_config_free twice is fine);
 * the dump loads back equal; and a fixed list key beyond TS_CFG_MAX_LIST is refused naming it. */
static void test_long_lists(void) {
  size_t cap = 1 << 16, n = 0;
  char *y = malloc(cap);
  CHECK(y != NULL);
  if (!y) return;
  n += (size_t)snprintf(y + n, cap - n, "model: {name: mlp, hidden: [8]}\nparallel:\n  mode: semi_auto_parallel\n"
                                          "  all_reduce_fusion_config: [");
  for (int i = 0; i < 40; i++) n += (size_t)snprintf(y + n, cap - n, "%s%d", i ? ", " : "", 3 * (i + 1));
  n += (size_t)snprintf(y + n, cap - n, "]\n  strategies:\n");
  for (int i = 0; i < 600; i++)
    n += (size_t)snprintf(y + n, cap - n, "    layer.%d.dense: '((1,%d),(1,%d))'\n", i, 1 + i % 2, 1 + i % 2);
  ts_config c, d, r;
  int rc = ts_config_load_string(y, "long.yaml", NULL, 0, &c);
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  CHECK(c.parallel.strategies.n == 600 && c.parallel.all_reduce_fusion_config.n == 40);
  CHECK(!strcmp(c.parallel.strategies.v[599].op, "layer.599.dense") &&
        !strcmp(c.parallel.strategies.v[599].text, "((1,2),(1,2))") && c.parallel.all_reduce_fusion_config.v[39] == 120);
  CHECK_OK(ts_config_copy(&d, &c));
  CHECK(cfg_equal(&c, &d) && d.parallel.strategies.v != c.parallel.strategies.v);
  char *dump = NULL;
  CHECK_OK(ts_config_dump_string(&c, &dump));
  ts_config_free(&c);
  ts_config_free(&c); /* twice: harmless */
  CHECK(c.parallel.strategies.n == 0 && c.parallel.strategies.v == NULL);
  CHECK(d.parallel.strategies.n == 600 && !strcmp(d.parallel.strategies.v[300].op, "layer.300.dense")); /* its own */
  rc = dump ? ts_config_load_string(dump, "dump.yaml", NULL, 0, &r) : TS_ENOMEM;
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  CHECK(!rc && cfg_equal(&r, &d));
  ts_config_free(&r);
  free(dump);
  /* a list set again replaces the old one (freed: ASan would tell) */
  CHECK_OK(ts_config_set(&d, "parallel.strategies", "{fc1.dense: '((2,1),(1,1))'}"));
  CHECK(d.parallel.strategies.n == 1 && !strcmp(d.parallel.strategies.v[0].op, "fc1.dense"));
  CHECK_OK(ts_config_set(&d, "parallel.all_reduce_fusion_config", "[]"));
  CHECK(d.parallel.all_reduce_fusion_config.n == 0);
  CHECK(ts_config_set(&d, "parallel.all_reduce_fusion_config", "[1, x]") == TS_ECONFIG);
  CHECK(has(ts_last_error(), "parallel.all_reduce_fusion_config[1]"));
  ts_config_free(&d);
  /* 300 stage rules */
  n = (size_t)snprintf(y, cap, "parallel:\n  pipeline_stages: 2\n  stages:\n");
  for (int i = 0; i < 300; i++) n += (size_t)snprintf(y + n, cap - n, "    transformer.h.%d: %d\n", i, i < 150 ? 0 : 1);
  rc = ts_config_load_string(y, "stages.yaml", NULL, 0, &c);
  CHECK_MSG(rc == TS_OK && c.parallel.stages.n == 300, "%s", ts_last_error());
  ts_dist_config dc;
  if (!rc) {
    ts_config_dist(&c, &dc);
    CHECK(dc.n_stage_rules == 300 && !strcmp(dc.stage_rules[299].op, "transformer.h.299") &&
          !strcmp(dc.stage_rules[299].text, "1"));
  }
  ts_config_free(&c);
  /* a fixed list: model.hidden holds TS_CFG_MAX_LIST values, one more is refused naming the key */
  n = (size_t)snprintf(y, cap, "model: {name: mlp, hidden: [");
  for (int i = 0; i <= TS_CFG_MAX_LIST; i++) n += (size_t)snprintf(y + n, cap - n, "%s4", i ? ", " : "");
  snprintf(y + n, cap - n, "]}\n");
  rc = ts_config_load_string(y, "wide.yaml", NULL, 0, &c);
  CHECK_MSG(rc == TS_ECONFIG && has(ts_last_error(), "model.hidden: at most 1024 values allowed, got 1025"), "%s",
            ts_last_error());
  ts_config_free(&c);
  y[n - 3] = ']', y[n - 2] = '}', y[n - 1] = '\n', y[n] = 0; /* 1024 values */
  rc = ts_config_load_string(y, "wide.yaml", NULL, 0, &c);
  CHECK_MSG(rc == TS_OK && c.model.hidden.n == TS_CFG_MAX_LIST, "%s", ts_last_error());
  ts_config_free(&c);
  free(y);
}

/* --set takes a string verbatim; one that is not UTF-8 is refused (YAML is UTF-8: it could never be
 * dumped and loaded again), naming the key and the byte; real UTF-8 round-trips. Found by fuzz_config. */
static void test_utf8_strings(void) {
  static const char *bad[] = {"data.path=/d/\xff", "data.path=ab\xc3", "data.path=\xc0\xaf", "data.path=\xed\xa0\x80",
                              "data.path=\xf4\x90\x80\x80", "data.path=x\xe2\x82"};
  static const size_t off[] = {3, 2, 0, 0, 0, 1};
  for (int i = 0; i < 6; i++) {
    ts_config c;
    ts_config_defaults(&c);
    int rc = ts_config_override(&c, bad[i]);
    char want[80];
    snprintf(want, sizeof want, "not valid UTF-8 (byte 0x%02x at offset %zu)",
             (unsigned char)bad[i][strlen("data.path=") + off[i]], off[i]);
    CHECK_MSG(rc == TS_ECONFIG && has(ts_last_error(), "data.path: the value is not valid UTF-8") &&
              has(ts_last_error(), want), "case %d: %d %s", i, rc, ts_last_error());
    ts_config_free(&c);
  }
  ts_config c, r;
  ts_config_defaults(&c);
  CHECK_OK(ts_config_override(&c, "data.path=/d/caf\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80"));
  char *dump = NULL;
  CHECK_OK(ts_config_dump_string(&c, &dump));
  int rc = dump ? ts_config_load_string(dump, "dump.yaml", NULL, 0, &r) : TS_ENOMEM;
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  if (!rc) {
    CHECK(!strcmp(r.data.path, c.data.path));
    ts_config_free(&r);
  }
  free(dump);
  ts_config_free(&c);
}

int main(void) {
  test_utf8_strings();
  test_long_lists();
  test_defaults();
  test_every_key_round_trips();
  test_yaml_features();
  test_errors();
  test_alias();
  test_hash();
  test_conversions();
  test_examples_and_docs();
  return ts_test_finish("test_config");
}
