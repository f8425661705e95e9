/* bench_ckpt: time to save (and to load) a checkpoint of a job in the whole and the sliced
 * format (docs/checkpoints.md), on the job's ranks.
 *
 *   OMP_NUM_THREADS=1 mpirun -n 4 build/bench_ckpt CONFIG [--rounds R] [--dir D] [--set key=value]...
 *
 * The trainer of CONFIG takes one step (the optimizer state exists), then R rounds; each round
 * saves a whole file (ts_trainer_save: every rank's slices gathered to rank 0, which writes) and
 * a sliced folder (ts_trainer_save_sliced: each rank writes its pieces, rank 0 the manifest), the
 * order alternating from round to round so load from other processes hits both alike, then loads
 * each back (ts_trainer_load). A time is from a barrier before to a barrier after, the maximum
 * over the ranks. Prints per format the median and the minimum over the rounds, the bytes on disk,
 * and the ratio of the medians; one JSON line at the end. Files go to D (default: ./bench_ckpt.tmp,
 * removed after).
 *
 * Asynchronous saves (checkpoint.async) are timed in the same rounds: ts_trainer_save_async of a
 * whole file and of a sliced folder, the time until it returns (the snapshot: what training
 * waits for) and the time of the ts_trainer_save_wait right after it (the background write); the
 * four saves' order rotates from round to round.
 *
 *   ... bench_ckpt CONFIG --overhead STEPS:K [--rounds R] ...
 *
 * instead measures what saving costs a training run: each round trains STEPS steps three times,
 * saving every K steps synchronously (checkpoint.async false), asynchronously (true), and not at
 * all, the order rotating from round to round, each run a fresh trainer (its creation not timed),
 * checkpoint.format as CONFIG says (auto), keep_max 2, no save at the end beyond the every-K ones;
 * a run's time is ts_trainer_fit's (barrier to barrier, the maximum over the ranks; the async
 * run's includes waiting for its last write). Prints per mode the median and minimum, the time
 * per step, and the cost per save against no saving. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "tessera/comm.h"
#include "tessera/train.h"

#define MAX_SETS 32
#define MAX_ROUNDS 100

static void die(const char *what) {
  fprintf(stderr, "bench_ckpt: %s: %s\n", what, ts_last_error());
  exit(1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  double c[MAX_ROUNDS];
  memcpy(c, v, sizeof(double) * (size_t)n);
  qsort(c, (size_t)n, sizeof *c, cmp);
  return n < 1 ? 0 : n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
}
static double minimum(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
  return m;
}

static ts_comm *g_w;

/* Seconds of fn over the job: barrier, fn, barrier; the maximum over the ranks. */
static double timed(int (*fn)(ts_trainer *, const char *), ts_trainer *t, const char *path, const char *what) {
  if (g_w) ts_comm_barrier(g_w);
  double t0 = ts_time_now();
  if (fn(t, path)) die(what);
  if (g_w) ts_comm_barrier(g_w);
  int64_t us = (int64_t)(1e6 * (ts_time_now() - t0));
  if (g_w) ts_comm_allreduce(g_w, &us, &us, 1, TS_I64, TS_REDUCE_MAX);
  return 1e-6 * (double)us;
}

static int load_all(ts_trainer *t, const char *p) { return ts_trainer_load(t, p, 1, 1); }
static int async_whole(ts_trainer *t, const char *p) { return ts_trainer_save_async(t, p, 0); }
static int async_sliced(ts_trainer *t, const char *p) { return ts_trainer_save_async(t, p, 1); }
static int async_wait(ts_trainer *t, const char *p) {
  (void)p;
  return ts_trainer_save_wait(t);
}

/* --overhead: STEPS steps saving every K (mode 0 none, 1 sync, 2 async); seconds of the fit. */
static double overhead_run(const char *cfgp, const char **sets, int ns, int steps, int every, int mode, const char *dir) {
  char st[64], dd[760], sv[64], as[64];
  snprintf(st, sizeof st, "train.steps=%d", steps);
  snprintf(dd, sizeof dd, "checkpoint.dir=%s", mode ? dir : "");
  snprintf(sv, sizeof sv, "checkpoint.save_steps=%d", every);
  snprintf(as, sizeof as, "checkpoint.async=%s", mode == 2 ? "true" : "false");
  const char *fixed[] = {st, dd, sv, as, "checkpoint.keep_max=2", "checkpoint.save_last=false", "train.eval_every=-1",
                         "checkpoint.resume=", "log.metrics=", "log.plot=", "log.progress=off"};
  const char *all[MAX_SETS + 12];
  int na = 0;
  for (int i = 0; i < ns; i++) all[na++] = sets[i];
  for (int i = 0; i < 11; i++) all[na++] = fixed[i];
  ts_config cfg;
  if (ts_config_load(cfgp, all, na, &cfg)) die(cfgp);
  ts_trainer *t;
  if (ts_trainer_create(&cfg, &t)) die("trainer");
  if (g_w) ts_comm_barrier(g_w);
  double t0 = ts_time_now();
  if (ts_trainer_fit(t)) die("fit");
  if (g_w) ts_comm_barrier(g_w);
  int64_t us = (int64_t)(1e6 * (ts_time_now() - t0));
  if (g_w) ts_comm_allreduce(g_w, &us, &us, 1, TS_I64, TS_REDUCE_MAX);
  ts_trainer_free(t);
  return 1e-6 * (double)us;
}

static void rm_rf(const char *dir) {
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) {
  }
}

static int overhead(const char *cfgp, const char **sets, int ns, int rounds, int steps, int every, const char *dir,
                    int rank, int N) {
  static const char *const names[3] = {"no save", "sync", "async"};
  double tm[3][MAX_ROUNDS];
  char d[700];
  snprintf(d, sizeof d, "%s/run", dir);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 3; k++) {
      int m = (r + k) % 3;
      tm[m][r] = overhead_run(cfgp, sets, ns, steps, every, m, d);
      if (rank == 0) rm_rf(dir);
      if (g_w) ts_comm_barrier(g_w);
    }
  if (rank == 0) {
    int saves = steps / every;
    double none = median(tm[0], rounds);
    printf("%s on %d ranks: %d steps, a save every %d (%d saves), %d rounds (order rotating), seconds: median (min)\n",
           cfgp, N, steps, every, saves, rounds);
    for (int m = 0; m < 3; m++) {
      double md = median(tm[m], rounds);
      printf("  %-8s %8.3f (%8.3f)  %8.2f ms/step", names[m], md, minimum(tm[m], rounds), 1e3 * md / steps);
      if (m) printf("  +%.1f%% over no save, %.3f s per save", 100 * (md / none - 1), saves ? (md - none) / saves : 0);
      printf("\n");
    }
    printf("{\"ranks\": %d, \"steps\": %d, \"every\": %d, \"rounds\": %d, \"none_s\": %.4f, \"sync_s\": %.4f, "
           "\"async_s\": %.4f}\n", N, steps, every, rounds, none, median(tm[1], rounds), median(tm[2], rounds));
  }
  return 0;
}

static uint64_t du(const char *path) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "du -sb '%s' 2>/dev/null", path);
  FILE *f = popen(cmd, "r");
  unsigned long long b = 0;
  if (f && fscanf(f, "%llu", &b) != 1) b = 0;
  if (f) pclose(f);
  return b;
}

int main(int argc, char **argv) {
  if (ts_comm_init(&argc, &argv)) die("MPI");
  if (ts_comm_world(&g_w)) die("MPI");
  int rank = ts_comm_rank(g_w), N = ts_comm_size(g_w), rounds = 5;
  const char *cfgp = NULL, *sets[MAX_SETS];
  char dir[600] = "bench_ckpt.tmp";
  int ns = 0, osteps = 0, oevery = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(dir, sizeof dir, "%s", argv[++i]);
    else if (!strcmp(argv[i], "--overhead") && i + 1 < argc && sscanf(argv[i + 1], "%d:%d", &osteps, &oevery) == 2 &&
             osteps > 0 && oevery > 0 && oevery <= osteps) i++;
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && ns < MAX_SETS) sets[ns++] = argv[++i];
    else if (argv[i][0] != '-' && !cfgp) cfgp = argv[i];
    else {
      fprintf(stderr, "usage: bench_ckpt CONFIG [--rounds R] [--dir D] [--overhead STEPS:K] [--set key=value]...\n");
      return 2;
    }
  }
  if (!cfgp || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "usage: bench_ckpt CONFIG [--rounds R (1..%d)] [--dir D] [--set key=value]...\n", MAX_ROUNDS);
    return 2;
  }
  if (osteps) {
    int rc = overhead(cfgp, sets, ns, rounds, osteps, oevery, dir, rank, N);
    ts_comm_barrier(g_w);
    ts_comm_free(g_w);
    ts_comm_finalize();
    return rc;
  }
  const char *fixed[] = {"train.steps=1", "train.eval_every=-1", "checkpoint.dir=", "checkpoint.resume=",
                         "log.metrics=", "log.plot=", "log.progress=off"};
  const char *all[MAX_SETS + 8];
  int na = 0;
  for (int i = 0; i < ns; i++) all[na++] = sets[i];
  for (int i = 0; i < 7; i++) all[na++] = fixed[i];
  ts_config cfg;
  if (ts_config_load(cfgp, all, na, &cfg)) die(cfgp);
  ts_trainer *t;
  if (ts_trainer_create(&cfg, &t)) die("trainer");
  if (ts_trainer_fit(t)) die("step");
  char whole[700], sliced[700];
  snprintf(whole, sizeof whole, "%s/whole.safetensors", dir);
  snprintf(sliced, sizeof sliced, "%s/sliced", dir);
  if (rank == 0) mkdir(dir, 0777);
  double sw[MAX_ROUNDS], ss[MAX_ROUNDS], lw[MAX_ROUNDS], ls[MAX_ROUNDS];
  double aw[MAX_ROUNDS], awr[MAX_ROUNDS], as[MAX_ROUNDS], asr[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 4; k++) switch ((r + k) % 4) {
      case 0: sw[r] = timed(ts_trainer_save, t, whole, "whole save"); break;
      case 1: ss[r] = timed(ts_trainer_save_sliced, t, sliced, "sliced save"); break;
      case 2:
        aw[r] = timed(async_whole, t, whole, "async whole save");
        awr[r] = timed(async_wait, t, whole, "async whole write");
        break;
      default:
        as[r] = timed(async_sliced, t, sliced, "async sliced save");
        asr[r] = timed(async_wait, t, sliced, "async sliced write");
    }
    if (r % 2 == 0) {
      lw[r] = timed(load_all, t, whole, "whole load");
      ls[r] = timed(load_all, t, sliced, "sliced load");
    } else {
      ls[r] = timed(load_all, t, sliced, "sliced load");
      lw[r] = timed(load_all, t, whole, "whole load");
    }
  }
  if (rank == 0) {
    uint64_t bw = du(whole), bs = du(sliced);
    printf("%s on %d ranks, %lld parameters, %d rounds (order alternating), seconds: median (min)\n", cfgp, N,
           (long long)ts_trainer_num_params(t), rounds);
    printf("  save whole   %8.4f (%8.4f)   %10llu bytes\n", median(sw, rounds), minimum(sw, rounds), (unsigned long long)bw);
    printf("  save sliced  %8.4f (%8.4f)   %10llu bytes\n", median(ss, rounds), minimum(ss, rounds), (unsigned long long)bs);
    printf("  async whole  %8.4f (%8.4f)   returns (gather + copy); its write after: %.4f (%.4f)\n", median(aw, rounds),
           minimum(aw, rounds), median(awr, rounds), minimum(awr, rounds));
    printf("  async sliced %8.4f (%8.4f)   returns (phase 1 + copy); its write after: %.4f (%.4f)\n", median(as, rounds),
           minimum(as, rounds), median(asr, rounds), minimum(asr, rounds));
    printf("  load whole   %8.4f (%8.4f)\n", median(lw, rounds), minimum(lw, rounds));
    printf("  load sliced  %8.4f (%8.4f)\n", median(ls, rounds), minimum(ls, rounds));
    printf("  sliced / whole: save %.3f, load %.3f (medians)\n", median(ss, rounds) / median(sw, rounds),
           median(ls, rounds) / median(lw, rounds));
    printf("{\"ranks\": %d, \"rounds\": %d, \"save_whole_s\": %.5f, \"save_sliced_s\": %.5f, \"load_whole_s\": %.5f, "
           "\"load_sliced_s\": %.5f, \"async_whole_return_s\": %.5f, \"async_sliced_return_s\": %.5f, "
           "\"bytes_whole\": %llu, \"bytes_sliced\": %llu}\n",
           N, rounds, median(sw, rounds), median(ss, rounds), median(lw, rounds), median(ls, rounds), median(aw, rounds),
           median(as, rounds),
           (unsigned long long)bw, (unsigned long long)bs);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
  }
  ts_trainer_free(t);
  ts_comm_barrier(g_w);
  ts_comm_free(g_w);
  ts_comm_finalize();
  return 0;
}
