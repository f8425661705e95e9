/* `tessera train`, `tessera eval` and `tessera plot`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fault.h"
#include "tessera/checkpoint.h"
#include "tessera/comm.h"
#include "tessera/plot.h"
#include "tessera/tessera.h"
#include "tessera/train.h"
#include "train/train_compat.h"

/* Exit status for a library status: configuration problems, and a file named by the command line or
 * the config that does not exist (TS_ENOTFOUND), are usage errors (2). */
int ts_cli_exit_code(int rc) { return rc == TS_ECONFIG || rc == TS_EUNSUPPORTED || rc == TS_ENOTFOUND ? 2 : 1; }

void ts_cli_config_release(ts_config *cfg) { ts_config_free(cfg); }

/* Parses CONFIG [--set k=v]... [--KEY VALUE] leaving unknown options to `extra`. */
int ts_cli_load_config(const char *cmd, int argc, char **argv, ts_config *cfg, const char **ckpt,
                       const char **plot_out) {
  const char *path = NULL;
  const char **sets = calloc((size_t)argc + 1, sizeof *sets);
  int nsets = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--set") || !strncmp(a, "--set=", 6)) {
      const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v || !strchr(v, '=')) {
        free(sets);
        return ts_cli_fail(2, "%s: --set needs key=value (e.g. --set train.epochs=3)", cmd);
      }
      sets[nsets++] = v;
    } else if (ckpt && !strcmp(a, "--checkpoint")) {
      if (i + 1 >= argc) { free(sets); return ts_cli_fail(2, "%s: --checkpoint needs a file", cmd); }
      *ckpt = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      free(sets);
      return ts_cli_fail(2, "%s: unknown option '%s' (see tessera %s --help)", cmd, a, cmd);
    } else if (!path) {
      path = a;
    } else {
      free(sets);
      return ts_cli_fail(2, "%s: unexpected argument '%s'", cmd, a);
    }
  }
  (void)plot_out;
  if (!path) {
    free(sets);
    return ts_cli_fail(2, "%s: missing CONFIG.yaml (see tessera %s --help)", cmd, cmd);
  }
  int rc = ts_config_load(path, sets, nsets, cfg);
  free(sets);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  const char *res = cfg->checkpoint.resume;
  if (res[0] && strcmp(res, "auto")) { /* checkpoint.resume: DIR/latest -> the checkpoint it names */
    char r[4096];
    int e = ts_cli_resolve_ckpt(res, r, sizeof r);
    if (e) return e;
    if (strcmp(r, res) && ts_config_set(cfg, "checkpoint.resume", r)) return ts_cli_fail(2, "%s", ts_last_error());
    if ((e = ts_cli_check_exists(r, "checkpoint.resume: cannot open the checkpoint"))) return e;
  }
  return 0;
}

int ts_cli_job_config(ts_config *cfg) {
  int r = 0, n = 1;
  ts_job_rank(&r, &n);
  if (ts_comm_check_env(r, n)) return ts_cli_fail(2, "%s", ts_last_error());
  if (n < 2) return 0;
  const char *src = cfg->source[0] ? cfg->source : "config";
  if (!ts_config_given(cfg, "parallel.mode")) {
    if (ts_config_set(cfg, "parallel.mode", "data_parallel")) return ts_cli_fail(1, "%s", ts_last_error());
    if (r == 0)
      ts_cli_note("%s sets no parallel.mode: data_parallel on the job's %d ranks (train.batch_size %d is the global "
                  "batch; set parallel.mode to choose another layout)", src, n, cfg->train.batch_size);
    return 0;
  }
  if (cfg->parallel.mode == TS_PARALLEL_STAND_ALONE)
    return ts_cli_fail(2, "%s: parallel.mode stand_alone trains in one process, but the job has %d ranks (they would "
                       "train %d separate copies, writing the same checkpoint.dir): set parallel.mode: data_parallel "
                       "(or another layout), or run one process", src, n, n);
  return 0;
}

int ts_cli_train(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tessera train CONFIG.yaml [--set key=value ...]\n"
             "Trains the model a config describes (docs/config.md lists every key); shows progress,\n"
             "evaluates, writes metrics and checkpoints, and resumes with checkpoint.resume.\n"
             "example: tessera train examples/resnet20_fashion.yaml --set train.epochs=2 "
             "--set checkpoint.dir=ckpt\n");
      return 0;
    }
  TS_CLI_CONFIG(cfg);
  int e = ts_cli_load_config("train", argc, argv, &cfg, NULL, NULL);
  if (!e) e = ts_cli_job_config(&cfg);
  if (e) return e;
  ts__faults faults; /* TESSERA_FAULT (tests of restarts); outlives the trainer */
  if (ts__faults_parse(getenv("TESSERA_FAULT"), &faults)) return ts_cli_fail(2, "%s", ts_last_error());
  ts_trainer *t;
  int rc = ts_trainer_create(&cfg, &t);
  if (!rc && (rc = ts__faults_install(&faults, t, &cfg))) ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  /* `tessera launch` sets TESSERA_RESTART: without it nothing can restart the job */
  if (cfg.train.restarts > 0 && !getenv("TESSERA_RESTART") && ts_trainer_rank(t) == 0)
    ts_log(TS_LOG_WARN, "train.restarts: %d is done by `tessera launch`; under plain mpirun or srun a lost rank ends "
           "the job (docs/parallel.md, \"Surviving a lost rank\")", cfg.train.restarts);
  if (ts_trainer_rank(t) == 0) {
    char where[160] = "";
    int64_t all = ts_trainer_num_params(t), mine = (int64_t)ts_params_numel(ts_trainer_params(t));
    int stages = ts__trainer_stages(t); /* the distribution object's */
    if (ts_trainer_world_size(t) > 1 && stages > 1)
      snprintf(where, sizeof where, ", pipeline of %d stages x %d %s %s (%s, %d micro-batches) on %d ranks",
               stages, ts_trainer_world_size(t) / stages,
               ts_parallel_mode_name(cfg.parallel.mode),
               cfg.parallel.mode == TS_PARALLEL_SEMI_AUTO ? "ranks" : "replicas",
               cfg.parallel.pipeline_schedule == 0 ? "gpipe" : cfg.parallel.pipeline_schedule == 1 ? "1f1b" : "interleaved_1f1b",
               cfg.parallel.micro_batches ? cfg.parallel.micro_batches : cfg.train.batch_size / cfg.train.micro_batch_size,
               ts_trainer_world_size(t));
    else if (ts_trainer_world_size(t) > 1)
      snprintf(where, sizeof where, ", %s on %d ranks", ts_parallel_mode_name(cfg.parallel.mode),
               ts_trainer_world_size(t));
    char per[96] = "";
    if (mine != all) snprintf(per, sizeof per, " (%lld on rank 0)", (long long)mine);
    char amp[48] = "";
    if (cfg.train.amp_level > 0)
      snprintf(amp, sizeof amp, ", mixed precision O%d %s", cfg.train.amp_level, cfg.train.amp_dtype ? "f16" : "bf16");
    printf("tessera %s: %s on %s, %lld parameters%s, %lld steps (%lld per epoch), batch %d, %s%s, %d threads%s\n",
           ts_version(), ts_model_kind_name(cfg.model.name), ts_data_kind_name(cfg.data.name), (long long)all, per,
           (long long)ts_config_total_steps(&cfg, ts_trainer_steps_per_epoch(t)),
           (long long)ts_trainer_steps_per_epoch(t), cfg.train.batch_size, ts_optim_kind_name(cfg.optimizer.name), amp,
           ts_threads_get(), where);
    ts_dist_memory_info m;
    if (ts_trainer_memory(t, &m) == TS_OK) { /* what the rank holds before step 1 (peak RSS: the metrics' end) */
      char line[512];
      ts_dist_memory_format(&m, line, sizeof line);
      printf("memory/rank%s: %s\n", ts_trainer_world_size(t) > 1 ? " (rank 0)" : "", line);
    }
    char dev[768];
    if (ts_trainer_device_info(t, dev, sizeof dev)) printf("device: %s\n", dev);
    const char *note = ts_trainer_reduction_note(t);
    if (note[0]) printf("%s\n", note);
    fflush(stdout);
  }
  rc = ts_trainer_fit(t);
  ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  return 0;
}

/* Evaluation on one process of a config whose layout is cut for several ranks (semi_auto or
 * auto_parallel, pipeline stages, a sharded optimizer): the whole model stand-alone instead, said
 * in one line; the checkpoint, sliced or whole, loads into it (a sliced one is merged as it is
 * read: each tensor whole from the pieces of every rank file). 0, or the exit status. */
static int eval_stand_alone(ts_config *cfg, const char *ckpt) {
  int rank = 0, n = 1;
  ts_job_rank(&rank, &n);
  const ts_parallel_mode mode = cfg->parallel.mode;
  int cut = mode == TS_PARALLEL_SEMI_AUTO || mode == TS_PARALLEL_AUTO || cfg->parallel.pipeline_stages > 1 ||
            cfg->parallel.optimizer_shard > 0 || cfg->parallel.device_num > 1;
  if (n > 1 || !cut || mode == TS_PARALLEL_HYBRID) return 0; /* hybrid: the program's own model */
  char was[160];
  int len = snprintf(was, sizeof was, "%s", ts_parallel_mode_name(mode));
  if (cfg->parallel.pipeline_stages > 1 && len < (int)sizeof was)
    len += snprintf(was + len, sizeof was - (size_t)len, ", %d pipeline stages", cfg->parallel.pipeline_stages);
  if (cfg->parallel.optimizer_shard > 0 && len < (int)sizeof was)
    snprintf(was + len, sizeof was - (size_t)len, ", optimizer_shard %d", cfg->parallel.optimizer_shard);
  /* the keys of a layout over several ranks, back to one process's (only those set: a key left
   * at its default stays unset) */
  static const char *const reset[][2] = {
      {"parallel.mode", "stand_alone"},        {"parallel.strategies", "{}"},
      {"parallel.stages", "{}"},               {"parallel.pipeline_stages", "1"},
      {"parallel.micro_batches", "0"},         {"parallel.virtual_stages", "1"},
      {"parallel.optimizer_shard", "off"},     {"parallel.enable_parallel_optimizer", "false"},
      {"parallel.device_num", "0"},            {"parallel.strategy_ckpt_load_file", "\"\""}};
  for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
    if ((i == 0 || ts_config_given(cfg, reset[i][0])) && ts_config_set(cfg, reset[i][0], reset[i][1]))
      return ts_cli_fail(1, "eval: %s", ts_last_error());
  int rc = ts_config_validate(cfg);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "eval: one process: %s", ts_last_error());
  ts_cli_note("eval: %s's layout (%s) is cut for several ranks: evaluating the whole model on this one process "
              "(parallel.mode stand_alone%s)", cfg->source[0] ? cfg->source : "the config", was,
              ts_ckpt_is_sliced(ckpt) ? "; the sliced checkpoint is merged as it loads" : "");
  return 0;
}

int ts_cli_eval(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tessera eval CONFIG.yaml --checkpoint FILE [--set key=value ...]\n"
             "Evaluates a checkpoint on the config's test data (loss, top-1, top-5).\n"
             "example: tessera eval examples/mlp_fashion.yaml --checkpoint ckpt/mlp-000002345.safetensors\n");
      return 0;
    }
  TS_CLI_CONFIG(cfg);
  const char *ckpt = NULL;
  int e = ts_cli_load_config("eval", argc, argv, &cfg, &ckpt, NULL);
  if (e) return e;
  if (!ckpt) return ts_cli_fail(2, "eval: --checkpoint FILE is required");
  char rckpt[4096];
  if ((e = ts_cli_resolve_ckpt(ckpt, rckpt, sizeof rckpt))) return e;
  ckpt = rckpt;
  if (ts_ckpt_is_sliced(ckpt)) { /* a sliced checkpoint: a folder with its manifest */
    char man[4200];
    snprintf(man, sizeof man, "%s/%s", ckpt, TS_CKPT_MANIFEST);
    if (access(man, F_OK) != 0)
      return ts_cli_fail(2, "%s: cannot open the checkpoint: is a directory without a %s (not a complete sliced "
                         "checkpoint)", ckpt, TS_CKPT_MANIFEST);
  } else if ((e = ts_cli_check_input(ckpt, "cannot open the checkpoint"))) {
    return e;
  }
  if ((e = eval_stand_alone(&cfg, ckpt))) return e;
  cfg.checkpoint.resume[0] = 0;
  cfg.checkpoint.dir[0] = 0;
  cfg.log.metrics[0] = 0;
  cfg.log.plot[0] = 0;
  cfg.log.tensorboard[0] = 0;
  ts_trainer *t;
  int rc = ts_trainer_create(&cfg, &t);
  if (!rc) rc = ts_trainer_load(t, ckpt, 1, 0);
  ts_eval_info ev;
  if (!rc) rc = ts_trainer_evaluate(t, &ev);
  int rank = rc ? 0 : ts_trainer_rank(t);
  ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  if (rank == 0) /* a job's ranks agree on the figures: rank 0 reports them */
    printf("eval %s: %lld samples  loss %.4f  top1 %.2f%%  top5 %.2f%%  (%.1f s)\n", ckpt,
           (long long)ev.samples, ev.loss, 100 * ev.top1, 100 * ev.top5, ev.seconds);
  return 0;
}

#define PLOT_USAGE "usage: tessera plot METRICS.jsonl -o CURVES.png [--size WxH] [--log-y] [--log-lr]"

int ts_cli_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  ts_plot_options po = {0};
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf(PLOT_USAGE "\n"
             "Draws loss, accuracy and learning-rate curves against step from a trainer metrics file.\n"
             "  -o CURVES.png   the PNG to write\n"
             "  --size WxH      its size in pixels (default %dx%d; %d..%d x %d..%d)\n"
             "  --log-y         the loss panel on a log scale (losses <= 0 left out, with a warning)\n"
             "  --log-lr        the learning-rate panel on a log scale (rates <= 0 left out, with a warning)\n"
             "example: tessera plot runs/mlp/metrics.jsonl -o runs/mlp/curves.png --size 1600x600 --log-y\n",
             TS_PLOT_W, TS_PLOT_H, TS_PLOT_MIN_W, TS_PLOT_MAX_SIDE, TS_PLOT_MIN_H, TS_PLOT_MAX_SIDE);
      return 0;
    }
    if (!strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) return ts_cli_fail(2, "plot: -o needs a file");
      out = argv[++i];
    } else if (!strcmp(argv[i], "--size")) {
      if (i + 1 >= argc) return ts_cli_fail(2, "plot: --size needs WIDTHxHEIGHT (e.g. 1600x600)");
      if (ts_plot_parse_size(argv[++i], "plot: --size", &po.width, &po.height))
        return ts_cli_fail(2, "%s", ts_last_error());
    } else if (!strcmp(argv[i], "--log-y")) {
      po.log_loss = 1;
    } else if (!strcmp(argv[i], "--log-lr")) {
      po.log_lr = 1;
    } else if (argv[i][0] == '-') {
      return ts_cli_fail(2, "plot: unknown option '%s' (" PLOT_USAGE ")", argv[i]);
    } else if (!in) {
      in = argv[i];
    } else {
      return ts_cli_fail(2, "plot: unexpected argument '%s'", argv[i]);
    }
  }
  if (!in || !out) return ts_cli_fail(2, "plot: " PLOT_USAGE);
  int e = ts_cli_check_exists(in, "cannot open the metrics file");
  if (e) return e;
  int rc = ts_plot_metrics_with(in, out, &po);
  if (rc) return ts_cli_fail(1, "%s", ts_last_error());
  printf("wrote %s\n", out);
  return 0;
}

/* `tessera plan CONFIG -n N [--rank R] [--set k=v ...]` */
/* "dp=2,tp=1,pp=1,micro_batches=4,zero=1,recompute=full" (keys may be left out: 1, 1, 1, the
 * pipeline's stages, 0, none) */
static int parse_fix(const char *spec, int n, int cfg_batch, int cfg_cp_algo, ts_autoplan *p) {
  memset(p, 0, sizeof *p);
  p->cp_algo = cfg_cp_algo; /* parallel.context_parallel_algo unless cp_algo= says */
  p->dp = p->tp = p->pp = 1;
  int mb = 0, mbs = 0, dp_given = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    char *eq = strchr(tok, '=');
    if (!eq) return ts_error_set(TS_ECONFIG, "plan --fix: '%s' is not key=value", tok);
    *eq = 0;
    const char *k = tok, *v = eq + 1;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    int num = end != v && !*end && x >= 0 && x <= 1 << 20;
    if (!strcmp(k, "cuts")) {
      if (strcmp(v, "search") && strcmp(v, "megatron")) return ts_error_set(TS_ECONFIG, "plan --fix: cuts is search or megatron");
      p->megatron = !strcmp(v, "megatron");
    } else if (!strcmp(k, "cp_algo")) {
      if (strcmp(v, "ulysses") && strcmp(v, "ring") && strcmp(v, "auto"))
        return ts_error_set(TS_ECONFIG, "plan --fix: cp_algo is ulysses, ring or auto");
      p->cp_algo = !strcmp(v, "ring") ? TS_CP_RING : !strcmp(v, "auto") ? TS_CP_AUTO : TS_CP_ULYSSES;
    } else if (!strcmp(k, "recompute")) {
      if (strcmp(v, "none") && strcmp(v, "full") && strcmp(v, "selective"))
        return ts_error_set(TS_ECONFIG, "plan --fix: recompute is none, full or selective");
      p->recompute = !strcmp(v, "full") ? 1 : !strcmp(v, "selective") ? 2 : 0;
    } else if (!num) {
      return ts_error_set(TS_ECONFIG, "plan --fix: %s=%s is not a number", k, v);
    } else if (!strcmp(k, "dp")) {
      p->dp = (int)x;
      dp_given = 1;
    } else if (!strcmp(k, "tp")) p->tp = (int)x;
    else if (!strcmp(k, "pp")) p->pp = (int)x;
    else if (!strcmp(k, "micro_batches") || !strcmp(k, "micro_batch")) mb = (int)x;
    else if (!strcmp(k, "micro_batch_size") || !strcmp(k, "mbs")) mbs = (int)x;
    else if (!strcmp(k, "virtual_stages")) p->virtual_stages = (int)x;
    else if (!strcmp(k, "zero")) p->zero = (int)x;
    else if (!strcmp(k, "sp") && x <= 1) p->sp = (int)x;
    else if (!strcmp(k, "cp") && x >= 1) p->cp = (int)x;
    else return ts_error_set(TS_ECONFIG, "plan --fix: unknown key '%s' (dp, tp, pp, micro_batches, "
                                                 "micro_batch_size, virtual_stages, zero, recompute, sp=0|1, cp, cp_algo, cuts)", k);
  }
  int cp = p->cp > 1 ? p->cp : 1;
  if (!dp_given && p->tp * p->pp > 0) p->dp = n / (p->tp * cp * p->pp);
  if (p->dp < 1 || p->tp < 1 || p->pp < 1 || p->dp * cp * p->tp * p->pp != n)
    return ts_error_set(TS_ECONFIG, "plan --fix: dp %d x cp %d x tp %d x pp %d is not the %d devices", p->dp, cp, p->tp,
                        p->pp, n);
  if (cp > 1 && !p->megatron)
    return ts_error_set(TS_ECONFIG, "plan --fix: cp=%d (context parallelism) takes Megatron-LM's cuts: "
                        "add cuts=megatron", cp);
  if (cp > 1 && p->sp)
    return ts_error_set(TS_ECONFIG, "plan --fix: sp=1 with cp=%d: both cut the sequence (not done yet: one dim cut by "
                        "two device axes)", cp);
  if (p->sp && p->tp < 2)
    return ts_error_set(TS_ECONFIG, "plan --fix: sp=1 cuts the sequence over the tensor-parallel ranks: it needs tp > 1");
  p->micro_batches = mb > 0 ? mb : p->pp;
  if (mbs > 0) { /* rows per replica: the micro-batch count follows from the batch */
    if (cfg_batch % ((int64_t)p->dp * mbs))
      return ts_error_set(TS_ECONFIG, "plan --fix: micro_batch_size %d x dp %d does not divide train.batch_size %d", mbs,
                          p->dp, cfg_batch);
    p->micro_batches = (int)(cfg_batch / ((int64_t)p->dp * mbs));
  }
  return TS_OK;
}

static int cmp_choice(const void *a, const void *b) {
  const ts_autoplan *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  if (!x->fits) return 0;
  /* as the search's choice: faster by more than 1e-9, else less memory */
  if (x->pred.step_s < y->pred.step_s * (1 - 1e-9)) return -1;
  if (y->pred.step_s < x->pred.step_s * (1 - 1e-9)) return 1;
  return (x->pred.memory_bytes > y->pred.memory_bytes) - (x->pred.memory_bytes < y->pred.memory_bytes);
}

/* The operator strategies of plan p, one "name":"strategy" pair each (JSON) or one line each. */
static void print_strategies(const ts_autoplan *p, int json) {
  int n = p->strategies ? ts_strategy_set_count(p->strategies) : 0;
  for (int i = 0; i < n; i++) {
    char t[256];
    ts_op_strategy_str(ts_strategy_set_at(p->strategies, i), t, sizeof t);
    if (json) printf("%s\"%s\":\"%s\"", i ? "," : "", ts_strategy_set_name(p->strategies, i), t);
    else printf("  %-48s %s\n", ts_strategy_set_name(p->strategies, i), t);
  }
}

/* Plan p's stage cut (pp > 1): as JSON, "prefix":piece pairs (parallel.stages' form); else one
 * line per piece: the stage running it and its operator-name prefixes (the first 8 shown). */
static void print_stage_rules(const ts_autoplan *p, int json) {
  if (json) {
    for (int i = 0; i < p->n_stage_rules; i++)
      printf("%s\"%s\":%s", i ? "," : "", p->stage_rules[i].op, p->stage_rules[i].text);
    return;
  }
  int pieces = p->pp * (p->virtual_stages > 1 ? p->virtual_stages : 1);
  for (int k = 0; k < pieces; k++) {
    printf("  piece %d on stage %d:", k, k % p->pp);
    int shown = 0, total = 0;
    for (int i = 0; i < p->n_stage_rules; i++) {
      if (atoi(p->stage_rules[i].text) != k) continue;
      if (shown < 8) printf("%s %s", shown ? "," : "", p->stage_rules[i].op), shown++;
      total++;
    }
    if (total > shown) printf(", ... (%d more)", total - shown);
    printf("\n");
  }
}

/* A plan as one JSON object (--json): the degrees, the micro-batching (rows per replica), the
 * predicted step and rates (tokens for text models), the memory, whether it fits, the strategies,
 * the stage cut. */
static void print_plan_json(const ts_config *cfg, int n, const ts_autoplan *p) {
  int gpt = cfg->model.name == TS_MODEL_GPT;
  double rate = p->pred.samples_per_s * (gpt ? (double)cfg->data.seq_len : 1.0);
  printf("{\"devices\":%d,\"dp\":%d,\"tp\":%d,\"cp\":%d,\"cp_algo\":\"%s\",\"pp\":%d,\"virtual_stages\":%d,\"micro_batch_size\":%d,"
         "\"num_micro_batches\":%d,\"zero_stage\":%d,\"recompute\":\"%s\",\"sequence_parallel\":%s,\"amp_level\":\"O%d\",\"step_time_s\":%.6g,"
         "\"%s\":%.6g,\"tflops_per_device\":%.6g,\"memory_per_device_bytes\":%lld,\"activation_bytes\":%lld,\"fits\":%s,"
         "\"strategies\":{",
         n, p->dp, p->tp, p->cp > 1 ? p->cp : 1, p->cp > 1 && p->cp_algo == TS_CP_RING ? "ring" : "ulysses", p->pp, p->virtual_stages > 1 ? p->virtual_stages : 1,
         ts_autoplan_micro_batch_size(p, cfg->train.batch_size), p->micro_batches > 0 ? p->micro_batches : 1, p->zero,
         ts_autoplan_recompute_name(p->recompute), p->sp ? "true" : "false", cfg->train.amp_level, p->pred.step_s, gpt ? "tokens_per_s" : "samples_per_s",
         rate, p->pred.step_s > 0 ? p->pred.flops / p->pred.step_s / 1e12 : 0, (long long)p->pred.memory_bytes,
         (long long)p->pred.activation_bytes, p->fits ? "true" : "false");
  print_strategies(p, 1);
  printf("},\"stages\":{");
  print_stage_rules(p, 1);
  printf("}}\n");
}

/* tessera plan --search: every plan, the chosen one first, with --json one object. */
static int plan_search(const ts_config *cfg, int n, const ts_cluster *cl, const char *cl_from, int json) {
  int cap = 16384, cnt = 0;
  ts_autoplan *all = calloc((size_t)cap, sizeof *all), chosen;
  if (!all) return ts_cli_fail(1, "plan: out of memory");
  double t0 = ts_time_now();
  int rc = ts_trainer_autoplan_search(cfg, n, cl, all, cap, &cnt, &chosen);
  double dt = ts_time_now() - t0;
  if (rc) {
    free(all);
    return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  }
  char s[160];
  ts_autoplan_str(&chosen, s, sizeof s);
  if (json) {
    print_plan_json(cfg, n, &chosen);
    ts_autoplan_free(&chosen);
    free(all);
    return 0;
  }
  qsort(all, (size_t)cnt, sizeof *all, cmp_choice);
  static const char *const smodes[] = {"dynamic_programming", "sharding_propagation", "recursive_programming"};
  int built = 0;
  for (int i = 0; i < cnt; i++) built += all[i].priced;
  int m = cfg->parallel.search_mode;
  printf("search on %d devices of %s: %d candidate plans, %d built and priced (the others refused or beyond their "
         "bounds) in %.1f s (per-operator search: %s; the cluster from %s)\n", n, cl->name, cnt, built, dt,
         m >= 0 && m < 3 ? smodes[m] : "?", cl_from);
  int unbuilt = 0; /* plans the time budget left out */
  for (int i = 0; i < cnt; i++) unbuilt += strstr(all[i].why, "time budget") != NULL;
  if (unbuilt)
    printf("stopped by the time budget of %g s: %d plans not built; the chosen plan is the best found so far\n",
           cfg->parallel.search_time_budget, unbuilt);
  printf("chosen: %s: %.3f ms per step, %.1f samples/s, %.2f MiB per device\n", s, 1e3 * chosen.pred.step_s,
         chosen.pred.samples_per_s, chosen.pred.memory_bytes / 1048576.0);
  if (ts_autoplan_model_ways(&chosen) > 1) {
    printf("operator strategies (%s):\n", chosen.megatron ? "Megatron-LM's cuts" : m >= 0 && m < 3 ? smodes[m] : "?");
    print_strategies(&chosen, 0);
  }
  if (chosen.pp > 1) {
    printf("stage cuts (%d rules, as parallel.stages):\n", chosen.n_stage_rules);
    print_stage_rules(&chosen, 0);
  }
  printf("  %-62s %10s %12s\n", "plan", "step ms", "MiB/device");
  int shown = 0;
  for (int i = 0; i < cnt && shown < 12; i++) {
    if (!all[i].fits) continue;
    ts_autoplan_str(&all[i], s, sizeof s);
    printf("  %-62s %10.3f %12.2f\n", s, 1e3 * all[i].pred.step_s, all[i].pred.memory_bytes / 1048576.0);
    shown++;
  }
  int rej = 0;
  for (int i = 0; i < cnt; i++) rej += !all[i].fits;
  if (rej) printf("rejected (%d):\n", rej);
  for (int i = 0, k = 0; i < cnt && k < 12; i++) {
    if (all[i].fits) continue;
    ts_autoplan_str(&all[i], s, sizeof s);
    printf("  %-62s %s\n", s, all[i].why);
    k++;
  }
  ts_autoplan_free(&chosen);
  free(all);
  return 0;
}

/* "16G", "80GiB", "512MB", "1.5T", "1073741824": bytes (binary units); -1 if not a size, -2 if out of
 * range (below one byte, or 2^63 bytes and more: no device, and beyond the byte counts' int64). */
static double parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v > 0) || !isfinite(v)) return -1;
  double unit = 1;
  switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1048576.0; end++; break;
    case 'g': case 'G': unit = 1073741824.0; end++; break;
    case 't': case 'T': unit = 1099511627776.0; end++; break;
    default: break;
  }
  if (unit > 1 && *end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  v *= unit;
  return v >= 1 && v < 9223372036854775807.0 ? v : -2; /* -2: out of range (below a byte, from 8 EiB up) */
}

static const char *human(double b, char *buf, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int k = 0;
  while (b >= 1024 && k < 5) { b /= 1024; k++; }
  snprintf(buf, cap, k ? "%.2f %s" : "%.0f %s", b, u[k]);
  return buf;
}

int ts_cli_plan(int argc, char **argv) {
  int n = 0, rank = 0, search = 0, json = 0;
  double device_mem = 0, time_budget = -1;
  const char *cluster = NULL, *fix = NULL;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      free(rest);
      printf("usage: tessera plan CONFIG.yaml -n N [--rank R] [--cluster NAME|FILE] [--device-memory SIZE]\n"
             "       [--fix PLAN | --search [--time-budget S]] [--json] [--set key=value ...]\n"
             "Prints what the config's parallel.mode does on N devices, without MPI and without\n"
             "training: the data cut, every operator's strategy and layouts (semi_auto_parallel),\n"
             "the collectives inserted with bytes per step, and per-rank memory for parameters,\n"
             "gradients, optimizer state and activations next to one process's (for rank R,\n"
             "default 0), the same figures the run reports (param_bytes ... peak_rss_bytes), and\n"
             "whether they fit train.max_memory_mb (exit 2 when not). N is at most 1048576 (2^20);\n"
             "the time grows linearly with N (about 0.3 s per 100,000 devices for the GPT example).\n"
             "--cluster: also the step time the cost model predicts on that cluster (a YAML file, or\n"
             "dgx-a100-80g, dgx-h100, dgx-h200, p3.16xlarge, local = this machine as `tessera calibrate` measured it); --search, --fix\n"
             "and --json without --cluster use the config's parallel.cluster (default local), as train does.\n"
             "--fix dp=..,tp=..,pp=..,micro_batches=..(or micro_batch_size=.. rows per replica),virtual_stages=..,\n"
             "zero=..,recompute=none|full|selective,sp=0|1,cp=..,cp_algo=ulysses|ring|auto,cuts=search|megatron: that plan instead of the config's layout (cuts: a\n"
             "tensor-parallel plan's operator strategies from parallel.search_mode's per-operator search, the\n"
             "default, or Megatron-LM's for GPT). --search: every plan (data, tensor, pipeline degrees, micro-batches, shard stage,\n"
             "recompute) priced on the cluster, the fastest that fits first (what auto_parallel trains);\n"
             "--json: the chosen plan as one JSON object. --time-budget S: the search stops after S seconds\n"
             "with the best plan found so far, and says so (parallel.search_time_budget; 0 = no limit).\n"
             "--device-memory SIZE (16G, 80GiB, 512M): the memory of one device; the plan ends with a verdict,\n"
             "whether rank R's figures (the total above) fit it (exit 2 when not). Without it, --cluster's\n"
             "device memory is used. -n may be left out when the config sets parallel.device_num.\n"
             "example: tessera plan examples/gpt_tp.yaml -n 4\n");
      return 0;
    }
    if ((!strcmp(argv[i], "-n") || !strcmp(argv[i], "--rank")) && i + 1 < argc) {
      char *end;
      long v = strtol(argv[i + 1], &end, 10);
      if (*end || v < 0 || v > 1 << 20) {
        free(rest);
        return ts_cli_fail(2, "plan: %s needs a number from 0 to 1048576, got '%s'", argv[i], argv[i + 1]);
      }
      if (argv[i][1] == 'n') n = (int)v;
      else rank = (int)v;
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--cluster") && i + 1 < argc) {
      cluster = argv[++i];
      continue;
    }
    if (!strcmp(argv[i], "--device-memory") && i + 1 < argc) {
      device_mem = parse_size(argv[i + 1]);
      if (device_mem == -2) {
        free(rest);
        return ts_cli_fail(2, "plan: --device-memory '%s' is out of range (from 1 byte to below 8 EiB)", argv[i + 1]);
      }
      if (device_mem <= 0) {
        free(rest);
        return ts_cli_fail(2, "plan: --device-memory needs a size such as 16G, 80GiB or 512M, got '%s'", argv[i + 1]);
      }
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--time-budget") && i + 1 < argc) {
      char *end;
      double v = strtod(argv[i + 1], &end);
      if (end == argv[i + 1] || *end || !(v >= 0) || v > 1e7) {
        free(rest);
        return ts_cli_fail(2, "plan: --time-budget needs seconds from 0 to 1e7 (0: no limit), got '%s'", argv[i + 1]);
      }
      time_budget = v;
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--fix") && i + 1 < argc) {
      fix = argv[++i];
      continue;
    }
    if (!strcmp(argv[i], "--search") || !strcmp(argv[i], "--json")) {
      search |= argv[i][2] == 's';
      json |= argv[i][2] == 'j';
      continue;
    }
    rest[nrest++] = argv[i];
  }
  TS_CLI_CONFIG(cfg);
  int e = ts_cli_load_config("plan", nrest, rest, &cfg, NULL, NULL);
  free(rest);
  if (e) return e;
  if (time_budget >= 0) cfg.parallel.search_time_budget = time_budget; /* --time-budget over the key */
  if (n < 1) n = cfg.parallel.device_num; /* MindSpore's device_num stands for -n */
  if (n < 1) return ts_cli_fail(2, "plan: give the device count with -n N or parallel.device_num (see tessera plan --help)");
  if (cfg.parallel.device_num > 0 && cfg.parallel.device_num != n)
    return ts_cli_fail(2, "%s: parallel.device_num is %d, but plan -n %d", cfg.source[0] ? cfg.source : "config",
                       cfg.parallel.device_num, n);
  if (rank >= n) return ts_cli_fail(2, "plan: --rank %d is not below -n %d", rank, n);
  ts_cluster cl;
  /* the cluster: --cluster, else the config's parallel.cluster (default local), as train reads it */
  const char *cl_from = "--cluster";
  if (cluster && strcmp(cfg.parallel.cluster, "local") && strcmp(cfg.parallel.cluster, cluster))
    fprintf(stderr, "plan: --cluster %s is used, not parallel.cluster=%s\n", cluster, cfg.parallel.cluster);
  if ((search || fix || json) && !cluster) {
    cluster = cfg.parallel.cluster[0] ? cfg.parallel.cluster : "local";
    cl_from = "parallel.cluster";
  }
  if (cluster && (e = ts_cluster_load(cluster, &cl))) return ts_cli_fail(ts_cli_exit_code(e), "%s", ts_last_error());
  if (search || (json && !fix)) return plan_search(&cfg, n, &cl, cl_from, json);
  ts_autoplan fp; /* --fix: the plan given, priced and reported as a value (its strategies a set) */
  memset(&fp, 0, sizeof fp);
  const ts_autoplan *given = NULL;
  if (fix) {
    TS_CLI_CONFIG(base);
    if ((e = ts_config_copy(&base, &cfg))) return ts_cli_fail(1, "%s", ts_last_error());
    if ((e = parse_fix(fix, n, cfg.train.batch_size, cfg.parallel.context_parallel_algo, &fp)) || (e = ts_trainer_autoplan_build(&cfg, &cl, &fp)) ||
        (e = ts_config_apply_autoplan(&cfg, &fp)) || (e = ts_config_validate(&cfg)))
      return ts_cli_fail(ts_cli_exit_code(e), "%s", ts_last_error());
    given = &fp;
    if (json) { /* the given plan priced, as one object */
      if ((e = ts_trainer_predict_autoplan(&base, &fp, n, rank, &cl, &fp.pred))) {
        ts_autoplan_free(&fp);
        return ts_cli_fail(ts_cli_exit_code(e), "%s", ts_last_error());
      }
      double total = (double)fp.pred.memory_bytes, budget = cfg.train.max_memory_mb * 1048576.0;
      fp.fits = total <= cl.mem_bytes && (budget <= 0 || total <= budget);
      print_plan_json(&base, n, &fp);
      ts_autoplan_free(&fp);
      fflush(stdout);
      return 0;
    }
  }
  char *text = NULL;
  ts_dist_memory_info m;
  int64_t base = 0;
  /* the report, the rank's figures and the process's baseline from one dry build */
  int rc = given ? ts_trainer_plan_report_autoplan(&cfg, given, n, rank, &text, &m, &base)
                 : ts_trainer_plan_report(&cfg, n, rank, NULL, NULL, &text, &m, &base);
  if (text) fputs(text, stdout); /* also when it would not fit train.max_memory_mb */
  free(text);
  const char *mem_from = device_mem > 0 ? "--device-memory" : "the cluster's devices";
  if (!(device_mem > 0) && cluster) device_mem = cl.mem_bytes;
  int no_fit = 0;
  if (!rc && device_mem > 0) { /* the verdict: what rank R's process holds against one device */
    {
      /* the model's figures (parameters, gradients, optimizer state, activations) plus the
       * process's baseline (libraries, MPI, the data sets: its resident set before the model),
       * as the peak_rss_bytes line above: what the device really holds */
      char h1[32], h2[32], h3[32], h4[32], h5[32];
      double need = (double)m.total_bytes + (double)base;
      no_fit = need > device_mem;
      printf("device memory %s (%s): %s: rank %d needs %s = the model's %s (total above) + a baseline of %s (this "
             "process's resident set before the model: libraries, MPI, data sets; %lld + %lld bytes)",
             human(device_mem, h1, sizeof h1), mem_from, no_fit ? "does NOT fit" : "fits", rank,
             human(need, h2, sizeof h2), human((double)m.total_bytes, h3, sizeof h3), human((double)base, h4, sizeof h4),
             (long long)m.total_bytes, (long long)base);
      if (no_fit)
        printf(", %s more\n", human(need - device_mem, h5, sizeof h5));
      else
        printf(" (%.1f%%), %s left for data workers' batches and kernel scratch\n", 100 * need / device_mem,
               human(device_mem - need, h5, sizeof h5));
    }
  }
  if (!rc && cluster) {
    ts_step_prediction p;
    rc = given ? ts_trainer_predict_autoplan(&cfg, given, n, rank, &cl, &p) : ts_trainer_predict(&cfg, n, rank, &cl, &p);
    if (!rc) {
      printf("\n");
      ts_cluster_describe(&cl, stdout);
      printf("predicted step on %s (rank %d, %lld micro-step%s): %.3f ms, %.1f samples/s\n", cl.name, rank,
             (long long)p.micro_steps, p.micro_steps == 1 ? "" : "s", 1e3 * p.step_s, p.samples_per_s);
      printf("  compute          %10.3f ms  (GEMM-like %.3f ms for %.3g GFLOP, memory-bound %.3f ms)\n", 1e3 * p.compute_s,
             1e3 * p.gemm_s, p.flops / 1e9, 1e3 * p.other_s);
      printf("  collectives/p2p  %10.3f ms\n", 1e3 * p.collectives_s);
      printf("  pipeline bubble  %10.3f ms\n", 1e3 * p.bubble_s);
      printf("  grad reduction   %10.3f ms  (%.3f ms not hidden behind backward)\n", 1e3 * p.reduce_s,
             1e3 * p.reduce_exposed_s);
      if (p.zero_buckets > 0)
        printf("    optimizer_shard: %d bucket%s reduce-scattered %.3f ms + all-gathered %.3f ms by %s, as measured on %s\n",
               p.zero_buckets, p.zero_buckets == 1 ? "" : "s", 1e3 * p.zero_reduce_scatter_s, 1e3 * p.zero_allgather_s,
               p.zero_ring ? "the ring" : "MPI's", cl.name);
      printf("  optimizer        %10.3f ms\n", 1e3 * p.optimizer_s);
      if (cl.h2d_bw > 0) printf("  batch to device  %10.3f ms  (pinned copies at %.3g GB/s)\n", 1e3 * p.input_s, cl.h2d_bw / 1e9);
    }
  }
  fflush(stdout);
  ts_autoplan_free(&fp);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  if (no_fit)
    return ts_cli_fail(2, "plan: rank %d's memory does not fit the device (%s); see the verdict above", rank, mem_from);
  return 0;
}
