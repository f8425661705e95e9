/* `tessera profile`: trains steps 1..B of a config with the profiler recording steps A..B
 * (log.profile: trace), prints the summary and writes the trace; or reads a trace back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera/prof.h"
#include "tessera/tessera.h"
#include "tessera/train.h"

static int usage(void) {
  printf("usage: tessera profile CONFIG.yaml [--steps A:B] [-o TRACE.json] [--set key=value ...]\n"
         "       tessera profile --summary TRACE.json [--top N]\n"
         "Trains steps 1..B of the config, then stops (the LR schedule stays the whole run's), with\n"
         "the profiler on from step A (the steps before are warm-up); prints the step broken into\n"
         "data / forward / backward /\n"
         "exposed communication / optimizer / other, the per-op-type and per-operator tables with\n"
         "achieved GFLOP/s, communication per collective, memory and, on several ranks, the slowest\n"
         "rank; and writes a Chrome trace (open it in https://ui.perfetto.dev). Default --steps 6:25,\n"
         "clamped to a shorter run (said in the header); an explicit window past the run's last step\n"
         "is refused;\n"
         "-o defaults to log.trace (<checkpoint.dir or .>/trace.json). No checkpoint is written.\n"
         "--summary reads a trace file back and prints its per-op tables (docs/profiling.md).\n"
         "example: tessera profile examples/mlp_fashion.yaml --steps 3:12 -o mlp-trace.json\n");
  return 0;
}

static int stop_after(ts_trainer *t, const ts_step_info *s, void *last) {
  if (s->step >= *(const long long *)last) ts_trainer_request_stop(t);
  return TS_OK;
}

/* The window A..B against a run of `total` steps. The default window (explicit = 0) is clamped
 * to the run: B = total when the run is shorter, and A then half-way (the first half warms up),
 * with a note for the header in note; an explicit one past the run's last step is refused (exit
 * status 2 after the message). 0, or the exit status. */
static int fit_window(long long total, int explicit, const char *why, long long *A, long long *B, char *note,
                      size_t cap) {
  note[0] = 0;
  if (total < 1) return ts_cli_fail(2, "profile: the run has no steps to profile (%s)", why);
  if (*B <= total) return 0;
  if (explicit)
    return ts_cli_fail(2, "profile: --steps %lld:%lld ends after the run's last step %lld (%s): give a window "
                       "within 1:%lld, or lengthen the run", *A, *B, total, why, total);
  long long a0 = *A, b0 = *B;
  *B = total;
  if (*A > total / 2 + 1) *A = total / 2 + 1;
  snprintf(note, cap, " (the default %lld:%lld clamped to the run's %lld step%s)", a0, b0, total, total == 1 ? "" : "s");
  return 0;
}

static int parse_steps(const char *s, long long *a, long long *b) {
  char *end;
  *a = strtoll(s, &end, 10);
  if (end == s || *end != ':') return -1;
  const char *t = end + 1;
  *b = strtoll(t, &end, 10);
  if (end == t || *end || *a < 1 || *b < *a) return -1;
  return 0;
}

int ts_cli_profile(int argc, char **argv) {
  const char *out = NULL, *summary = NULL, *steps = "6:25";
  int explicit = 0;
  int top = 15;
  char **rest = calloc((size_t)argc + 8, sizeof *rest);
  if (!rest) return ts_cli_fail(1, "profile: out of memory");
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      free(rest);
      return usage();
    }
    if (!strcmp(a, "--steps") || !strcmp(a, "-o") || !strcmp(a, "--summary") || !strcmp(a, "--top")) {
      if (i + 1 >= argc) {
        free(rest);
        return ts_cli_fail(2, "profile: %s needs a value (see tessera profile --help)", a);
      }
      const char *v = argv[++i];
      if (a[1] == 'o') out = v;
      else if (a[2] == 's' && a[3] == 't') steps = v, explicit = 1;
      else if (a[2] == 's') summary = v;
      else if ((top = atoi(v)) < 1) {
        free(rest);
        return ts_cli_fail(2, "profile: --top needs a positive number, got '%s'", v);
      }
      continue;
    }
    rest[nrest++] = argv[i];
  }
  if (summary) {
    free(rest);
    int e = ts_cli_check_input(summary, "cannot read the trace");
    if (e) return e;
    char *text;
    int rc = ts_prof_trace_summary(summary, top, &text);
    if (rc) return ts_cli_fail(rc == TS_EFORMAT ? 2 : 1, "%s", ts_last_error());
    fputs(text, stdout);
    free(text);
    return 0;
  }
  long long A, B;
  if (parse_steps(steps, &A, &B)) {
    free(rest);
    return ts_cli_fail(2, "profile: --steps needs A:B with 1 <= A <= B (e.g. 6:25), got '%s'", steps);
  }
  /* the profile run: B steps, recording from A, a trace, no checkpoints */
  char s_start[64], s_trace[4200];
  snprintf(s_start, sizeof s_start, "log.profile_start=%lld", A);
  /* every step of the window gets its metrics record (the per-phase times) */
  const char *extra[] = {"--set", s_start, "--set", "log.profile=trace", "--set", "checkpoint.resume=",
                         "--set", "train.log_every=1"};
  for (int k = 0; k < 8; k++) rest[nrest++] = (char *)extra[k];
  TS_CLI_CONFIG(cfg);
  int e = ts_cli_load_config("profile", nrest, rest, &cfg, NULL, NULL);
  free(rest);
  if (!e) e = ts_cli_job_config(&cfg);
  if (e) return e;
  if (out) snprintf(cfg.log.trace, sizeof cfg.log.trace, "%s", out);
  else if (!cfg.log.trace[0]) {
    int k = snprintf(s_trace, sizeof s_trace, "%s/trace.json", cfg.checkpoint.dir[0] ? cfg.checkpoint.dir : ".");
    if (k < 0 || (size_t)k >= sizeof cfg.log.trace)
      return ts_cli_fail(2, "profile: checkpoint.dir is too long for a trace path: give -o TRACE.json");
    memcpy(cfg.log.trace, s_trace, (size_t)k + 1);
  }
  cfg.checkpoint.dir[0] = 0; /* profiling writes no checkpoints */
  if (cfg.log.progress == TS_PROGRESS_AUTO || cfg.log.progress == TS_PROGRESS_OFF) cfg.log.progress = TS_PROGRESS_LINES;
  /* the window within the run: its length is the config's train.steps, else known once the
   * trainer has the data (epochs x steps per epoch; the trainer is then made again for a
   * clamped window's first step) */
  const char *src = cfg.source[0] ? cfg.source : "config";
  char note[160] = "", why[400];
  long long total = cfg.train.steps > 0 ? cfg.train.steps : -1;
  snprintf(why, sizeof why, "%.300s: train.steps %lld", src, total);
  int64_t cap; /* TESSERA_MAX_STEPS: the run is that much shorter, any window clamped to it */
  if (ts_config_max_steps(&cap)) return ts_cli_fail(2, "%s", ts_last_error());
  long long a0 = A, b0 = B;
  int capped = cap > 0 && total > cap;
  if (capped) total = cap, explicit = 0;
  if (total > 0 && (e = fit_window(total, explicit, why, &A, &B, note, sizeof note))) return e;
  cfg.log.profile_start = A;
  ts_trainer *t;
  int rc = ts_trainer_create(&cfg, &t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  if (total < 0) {
    total = (long long)ts_config_total_steps(&cfg, ts_trainer_steps_per_epoch(t));
    capped = cap > 0 && total > cap;
    if (capped) total = cap, explicit = 0;
    snprintf(why, sizeof why, "%.300s: train.epochs %d x %lld steps per epoch", src, cfg.train.epochs,
             (long long)ts_trainer_steps_per_epoch(t));
    if ((e = fit_window(total, explicit, why, &A, &B, note, sizeof note))) {
      ts_trainer_free(t);
      return e;
    }
    if (A != a0) {
      ts_trainer_free(t);
      cfg.log.profile_start = A;
      if ((rc = ts_trainer_create(&cfg, &t))) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
    }
  }
  if (capped && b0 > cap)
    snprintf(note, sizeof note, " (%lld:%lld clamped to TESSERA_MAX_STEPS=%lld)", a0, b0, (long long)cap);
  if (ts_trainer_rank(t) == 0) {
    printf("tessera %s profile: %s on %s, steps %lld..%lld recorded of %lld%s, batch %d, %d threads, %d rank(s)\n",
           ts_version(), ts_model_kind_name(cfg.model.name), ts_data_kind_name(cfg.data.name), A, B, B, note,
           cfg.train.batch_size, ts_threads_get(), ts_trainer_world_size(t));
    fflush(stdout);
  }
  /* the run stops after step B, its schedule (warm-up, decay) that of the whole config's run */
  ts_callback stop = {"profile_window", stop_after, NULL, NULL, NULL, &B};
  if (!(rc = ts_trainer_add_callback(t, &stop))) rc = ts_trainer_fit(t);
  ts_trainer_free(t);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  return 0;
}
