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
 * removed after). */
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
  int ns = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(dir, sizeof dir, "%s", argv[++i]);
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && ns < MAX_SETS) sets[ns++] = argv[++i];
    else if (argv[i][0] != '-' && !cfgp) cfgp = argv[i];
    else {
      fprintf(stderr, "usage: bench_ckpt CONFIG [--rounds R] [--dir D] [--set key=value]...\n");
      return 2;
    }
  }
  if (!cfgp || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "usage: bench_ckpt CONFIG [--rounds R (1..%d)] [--dir D] [--set key=value]...\n", MAX_ROUNDS);
    return 2;
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
  for (int r = 0; r < rounds; r++) {
    if (r % 2 == 0) {
      sw[r] = timed(ts_trainer_save, t, whole, "whole save");
      ss[r] = timed(ts_trainer_save_sliced, t, sliced, "sliced save");
    } else {
      ss[r] = timed(ts_trainer_save_sliced, t, sliced, "sliced save");
      sw[r] = timed(ts_trainer_save, t, whole, "whole save");
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
    printf("  load whole   %8.4f (%8.4f)\n", median(lw, rounds), minimum(lw, rounds));
    printf("  load sliced  %8.4f (%8.4f)\n", median(ls, rounds), minimum(ls, rounds));
    printf("  sliced / whole: save %.3f, load %.3f (medians)\n", median(ss, rounds) / median(sw, rounds),
           median(ls, rounds) / median(lw, rounds));
    printf("{\"ranks\": %d, \"rounds\": %d, \"save_whole_s\": %.5f, \"save_sliced_s\": %.5f, \"load_whole_s\": %.5f, "
           "\"load_sliced_s\": %.5f, \"bytes_whole\": %llu, \"bytes_sliced\": %llu}\n",
           N, rounds, median(sw, rounds), median(ss, rounds), median(lw, rounds), median(ls, rounds),
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
