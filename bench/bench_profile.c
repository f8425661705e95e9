/* bench_profile: the profiler's overhead on a training step, as JSON lines on stdout.
 *
 *   {"name":"profile_overhead","model":"gpt_6l_384d","off_ms":..,"summary_ms":..,"trace_ms":..,
 *    "summary_ratio":..,"trace_ratio":..,"events_per_step":..,"trace_write_ms":..}
 *
 * For the GPT (6 layers, d 384, batch 8 x 256) and ResNet-18 (CIFAR, batch 64) steps of
 * bench_step: the plan hook the trainer installs (src/train/train_prof.c) plus the trainer's
 * spans (step begin/end, optimizer) around each step, modes off / summary / trace interleaved
 * in rounds (off, summary, trace, then trace, summary, off, ...) so that drifts of a shared
 * machine hit every mode alike; the median step of each mode over all rounds, and the ratio to
 * off. "off" has no hook on the plan, as in the trainer with log.profile: off.
 *
 *   bench_profile [--threads N] [--rounds R] [--steps S] [--warmup W] [--only gpt|resnet18] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "tessera/prof.h"
#include "train/train_impl.h"

static void step(trainer *t, uint64_t s, ts_prof *p) {
  double t0 = ts_time_now();
  if (p) ts_prof_step_begin(p, (int64_t)s + 1, t0);
  if (ts_plan_run(t->plan, s)) die("running the training step");
  double t1 = ts_time_now();
  if (ts_optim_step(t->opt, ts_params_data(t->ps), ts_params_grads(t->ps), t->lr)) die("optimizer step");
  if (p) {
    ts_prof_event e;
    memset(&e, 0, sizeof e);
    e.name = "optimizer";
    e.cat = "trainer";
    e.kind = TS_PROF_OPTIMIZER;
    e.t0 = t1;
    e.t1 = ts_time_now();
    ts_prof_record(p, &e);
    ts_prof_step_end(p, e.t1, NULL);
  }
}

static void bench(const char *model, int batch, int seq, int rounds, int steps, int warmup) {
  trainer t;
  bench_model_opts mo = {.batch = batch, .seq = seq};
  bench_model_build(&t, model, &mo);
  ts_prof *prof[3] = {NULL, NULL, NULL};
  ts__tprof *tp[3] = {NULL, NULL, NULL};
  for (int m = 1; m < 3; m++) {
    ts_prof_config pc = ts_prof_config_default();
    pc.mode = (ts_prof_mode)m;
    pc.ring_events = 1 << 20; /* the whole trace of the run: nothing dropped */
    if (ts_prof_create(&pc, 0, &prof[m])) die("creating the profiler");
    ts_prof_set_active(prof[m], 1);
  }
  uint64_t s = 0;
  for (int i = 0; i < warmup; i++) step(&t, s++, NULL);
  int n = rounds * steps;
  double *ms[3];
  for (int m = 0; m < 3; m++) ms[m] = malloc(sizeof(double) * (size_t)n);
  int k[3] = {0, 0, 0};
  for (int r = 0; r < rounds; r++)
    for (int q = 0; q < 3; q++) {
      int m = r % 2 ? 2 - q : q; /* off, summary, trace; then trace, summary, off */
      if (m && ts__tprof_attach(prof[m], t.plan, t.g, 1, &tp[m])) die("attaching the profiler hook");
      for (int i = 0; i < steps; i++) {
        double t0 = ts_time_now();
        step(&t, s++, prof[m]);
        ms[m][k[m]++] = 1e3 * (ts_time_now() - t0);
      }
      ts__tprof_free(tp[m]); /* removes the hook */
      tp[m] = NULL;
    }
  double med[3];
  for (int m = 0; m < 3; m++) med[m] = median(ms[m], n);
  double tw0 = ts_time_now();
  char *buf;
  size_t len;
  if (ts_prof_trace_events(prof[2], &buf, &len)) die("trace events");
  const char *parts[1] = {buf};
  char path[] = "/tmp/bench_profile_trace.json";
  if (ts_prof_trace_write(path, parts, &len, 1, ts_prof_dropped(prof[2]))) die("writing the trace");
  double tw = 1e3 * (ts_time_now() - tw0);
  remove(path);
  free(buf);
  printf("{\"name\":\"profile_overhead\",\"model\":\"%s\",\"threads\":%d,\"steps_per_mode\":%d,\"off_ms\":%.3f,"
         "\"summary_ms\":%.3f,\"trace_ms\":%.3f,\"summary_ratio\":%.4f,\"trace_ratio\":%.4f,\"events_per_step\":%.0f,"
         "\"dropped\":%lld,\"trace_mb\":%.2f,\"trace_write_ms\":%.1f}\n",
         model, ts_threads_get(), n, med[0], med[1], med[2], med[1] / med[0], med[2] / med[0],
         (double)ts_prof_recorded(prof[2]) / n, (long long)ts_prof_dropped(prof[2]), (double)len / 1e6, tw);
  fflush(stdout);
  for (int m = 0; m < 3; m++) {
    free(ms[m]);
    ts_prof_free(prof[m]);
  }
  trainer_free(&t);
}

int main(int argc, char **argv) {
  bench_prog = "bench_profile";
  int rounds = 6, steps = 5, warmup = 3, threads = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "usage: bench_profile [--threads N] [--rounds R] [--steps S] [--warmup W] [--only gpt|resnet18]\n");
      return 2;
    }
    if (!strcmp(a, "--threads")) threads = atoi(v);
    else if (!strcmp(a, "--rounds")) rounds = atoi(v);
    else if (!strcmp(a, "--steps")) steps = atoi(v);
    else if (!strcmp(a, "--warmup")) warmup = atoi(v);
    else if (!strcmp(a, "--only")) only = v;
    else {
      fprintf(stderr, "bench_profile: unknown option '%s'\n", a);
      return 2;
    }
    i++;
  }
  if (rounds < 1 || steps < 1 || warmup < 0) die("--rounds and --steps must be >= 1");
  if (threads > 0) ts_threads_set(threads);
  if (!only || !strcmp(only, "gpt")) bench("gpt", 8, 256, rounds, steps, warmup);
  if (!only || !strcmp(only, "resnet18")) bench("resnet18", 64, 0, rounds, steps, warmup);
  return 0;
}
