/* `tessera train`, `tessera eval` and `tessera plot`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera/plot.h"
#include "tessera/tessera.h"
#include "tessera/train.h"

/* Exit status for a library status: configuration problems are usage errors (2). */
int ts_cli_exit_code(int rc) { return rc == TS_ECONFIG || rc == TS_EUNSUPPORTED ? 2 : 1; }

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
  ts_config cfg;
  int e = ts_cli_load_config("train", argc, argv, &cfg, NULL, NULL);
  if (e) return e;
  ts_trainer *t;
  int rc = ts_trainer_create(&cfg, &t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  if (ts_trainer_rank(t) == 0) {
    char where[160] = "";
    int64_t all = ts_trainer_num_params(t), mine = (int64_t)ts_params_numel(ts_trainer_params(t));
    if (ts_trainer_world_size(t) > 1 && cfg.parallel.pipeline_stages > 1)
      snprintf(where, sizeof where, ", pipeline of %d stages x %d %s %s (%s, %d micro-batches) on %d ranks",
               cfg.parallel.pipeline_stages, ts_trainer_world_size(t) / cfg.parallel.pipeline_stages,
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
    printf("tessera %s: %s on %s, %lld parameters%s, %lld steps (%lld per epoch), batch %d, %s, %d threads%s\n",
           ts_version(), ts_model_kind_name(cfg.model.name), ts_data_kind_name(cfg.data.name), (long long)all, per,
           (long long)ts_config_total_steps(&cfg, ts_trainer_steps_per_epoch(t)),
           (long long)ts_trainer_steps_per_epoch(t), cfg.train.batch_size, ts_optim_kind_name(cfg.optimizer.name),
           ts_threads_get(), where);
    ts_dist_memory_info m;
    if (ts_trainer_memory(t, &m) == TS_OK) { /* what the rank holds before step 1 (peak RSS: the metrics' end) */
      char line[512];
      ts_dist_memory_format(&m, line, sizeof line);
      printf("memory/rank%s: %s\n", ts_trainer_world_size(t) > 1 ? " (rank 0)" : "", line);
    }
    fflush(stdout);
  }
  rc = ts_trainer_fit(t);
  ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
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
  ts_config cfg;
  const char *ckpt = NULL;
  int e = ts_cli_load_config("eval", argc, argv, &cfg, &ckpt, NULL);
  if (e) return e;
  if (!ckpt) return ts_cli_fail(2, "eval: --checkpoint FILE is required");
  if ((e = ts_cli_check_input(ckpt, "cannot open the checkpoint"))) return e;
  cfg.checkpoint.resume[0] = 0;
  cfg.checkpoint.dir[0] = 0;
  cfg.log.metrics[0] = 0;
  cfg.log.plot[0] = 0;
  ts_trainer *t;
  int rc = ts_trainer_create(&cfg, &t);
  if (!rc) rc = ts_trainer_load(t, ckpt, 1, 0);
  ts_eval_info ev;
  if (!rc) rc = ts_trainer_evaluate(t, &ev);
  ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  printf("eval %s: %lld samples  loss %.4f  top1 %.2f%%  top5 %.2f%%  (%.1f s)\n", ckpt,
         (long long)ev.samples, ev.loss, 100 * ev.top1, 100 * ev.top5, ev.seconds);
  return 0;
}

int ts_cli_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tessera plot METRICS.jsonl -o CURVES.png\n"
             "Draws loss and accuracy curves from a trainer metrics file.\n"
             "example: tessera plot runs/mlp/metrics.jsonl -o runs/mlp/curves.png\n");
      return 0;
    }
    if (!strcmp(argv[i], "-o")) {
      if (i + 1 >= argc) return ts_cli_fail(2, "plot: -o needs a file");
      out = argv[++i];
    } else if (argv[i][0] == '-') {
      return ts_cli_fail(2, "plot: unknown option '%s'", argv[i]);
    } else if (!in) {
      in = argv[i];
    } else {
      return ts_cli_fail(2, "plot: unexpected argument '%s'", argv[i]);
    }
  }
  if (!in || !out) return ts_cli_fail(2, "plot: usage: tessera plot METRICS.jsonl -o CURVES.png");
  int rc = ts_plot_metrics(in, out);
  if (rc) return ts_cli_fail(1, "%s", ts_last_error());
  printf("wrote %s\n", out);
  return 0;
}

/* `tessera plan CONFIG -n N [--rank R] [--set k=v ...]` */
int ts_cli_plan(int argc, char **argv) {
  int n = 0, rank = 0;
  const char *cluster = NULL;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      free(rest);
      printf("usage: tessera plan CONFIG.yaml -n N [--rank R] [--cluster NAME|FILE] [--set key=value ...]\n"
             "Prints what the config's parallel.mode does on N devices, without MPI and without\n"
             "training: the data cut, every operator's strategy and layouts (semi_auto_parallel),\n"
             "the collectives inserted with bytes per step, and per-rank memory for parameters,\n"
             "gradients, optimizer state and activations next to one process's (for rank R,\n"
             "default 0), the same figures the run reports (param_bytes ... peak_rss_bytes), and\n"
             "whether they fit train.max_memory_mb (exit 2 when not). N is at most 1048576 (2^20);\n"
             "the time grows linearly with N (about 0.3 s per 100,000 devices for the GPT example).\n"
             "--cluster: also the step time the cost model predicts on that cluster (a YAML file, or\n"
             "dgx-a100-80g, p3.16xlarge, local = this machine as `tessera calibrate` measured it).\n"
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
    rest[nrest++] = argv[i];
  }
  if (n < 1) {
    free(rest);
    return ts_cli_fail(2, "plan: give the device count with -n N (see tessera plan --help)");
  }
  ts_config cfg;
  int e = ts_cli_load_config("plan", nrest, rest, &cfg, NULL, NULL);
  free(rest);
  if (e) return e;
  if (rank >= n) return ts_cli_fail(2, "plan: --rank %d is not below -n %d", rank, n);
  ts_cluster cl;
  if (cluster && (e = ts_cluster_load(cluster, &cl))) return ts_cli_fail(ts_cli_exit_code(e), "%s", ts_last_error());
  char *text = NULL;
  int rc = ts_trainer_plan(&cfg, n, rank, NULL, NULL, &text);
  if (text) fputs(text, stdout); /* also when it would not fit train.max_memory_mb */
  free(text);
  if (!rc && cluster) {
    ts_step_prediction p;
    rc = ts_trainer_predict(&cfg, n, rank, &cl, &p);
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
      printf("  optimizer        %10.3f ms\n", 1e3 * p.optimizer_s);
    }
  }
  fflush(stdout);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  return 0;
}
