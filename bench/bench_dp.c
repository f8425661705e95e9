/* bench_dp: data-parallel scaling of Tessera, with PyTorch DDP (gloo) measured in the same
 * invocation. JSON lines on stdout; diagnostics on stderr.
 *
 *   build/bench_dp [--models resnet18,gpt,mlp] [--warmup N] [--steps N] [--ranks N]
 *                  [--resnet-batch B] [--gpt-batch B] [--gpt-seq T] [--mlp-batch B]
 *                  [--bucket-mb M] [--torch-bucket-mb M] [--no-torch]
 *                  [--blocking native,polled] [--rounds K] [--amp O0|O1|O2|O3]
 *
 * --amp: Tessera's models at that amp_level in bf16 (f32 master weights, so the buckets reduced
 * are f32 as at O0); the PyTorch side stays f32 (use --no-torch).
 * For each model, with B samples PER RANK and one thread per rank (weak scaling, as the issue's
 * reference figures):
 *   1 x 1   the stand-alone step (no communication), under mpirun -n 1;
 *   N x 1   data parallel, buckets all-reduced while backward runs (overlap);
 *   N x 1   the same with overlap off: every bucket is reduced after backward, so the wait is
 *           the whole communication time, `comm_ms`;
 *   N x 1   every rank training alone, no communication: what N processes sharing the machine
 *           (memory bandwidth, caches, clocks) cost by themselves.
 * The two data-parallel runs are made for each --blocking mode (ts_comm_set_blocking on the world
 * before the reducer is made: native, what a training job uses, reduces the buckets left after
 * backward with MPI's blocking call; polled, as before, MPI_Iallreduce + polling for every one),
 * and the whole set is repeated --rounds times in the same order (figures: the median over the
 * rounds of each run's median step), so that drifts of a shared machine fall on every run.
 * and prints per model
 *   {"name":"dp_scaling","model":..,"ranks":N,"batch_per_rank":B,
 *    "tessera_1x1_sps":..,"tessera_sps":..,"tessera_efficiency":..,   sps = samples/s
 *    "comm_ms":..,"comm_share":..,     communication time (the wait after backward without
 *                                      overlap, skew between ranks included) and its share
 *    "exposed_ms":..,                  the wait after backward left with overlap
 *    "hidden":..,                      1 - (N-rank step - 1-rank step) / comm_ms: the fraction of
 *                                      the communication that did not lengthen the step
 *    "torch_1x1_sps":..,"torch_sps":..,"torch_efficiency":..,"efficiency_vs_torch":..}
 * (one line per --blocking mode, "blocking":"native"|"polled").
 * efficiency = N-rank samples/s / (N x 1-rank samples/s). The workers are this program run with
 * --worker under mpirun; the PyTorch side is bench/torch_ddp.py (same models and recipes).
 * Step time per step = the slowest rank's (ranks start each step together, after a barrier);
 * figures are medians over --steps steps after --warmup. BENCH_DP_TRACE=1 in the environment
 * makes every worker print each step's forward+backward, reduction and optimizer times (stderr). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "tessera/comm.h"
#include "distribution/dist.h"

#define TORCH_PY "/usr/bin/python3"

typedef struct {
  int warmup, steps, ranks;
  int resnet_batch, gpt_batch, gpt_seq, mlp_batch;
  double bucket_mb, torch_bucket_mb;
  int torch;
  const char *models;
  /* worker */
  const char *model;
  int overlap;
  int alone; /* N ranks each training alone, no communication (the machine's contention) */
  const char *blocking; /* driver: the modes; worker: its mode */
  int rounds;
  int amp; /* 0: f32; 1..3: the models at amp_level O1..O3, bf16 (f32 master weights and gradients) */
} options;

static int batch_of(const options *o, const char *model) {
  return !strcmp(model, "resnet18") ? o->resnet_batch : !strcmp(model, "gpt") ? o->gpt_batch : o->mlp_batch;
}

/* ---------------------------------------------------------------- worker (under mpirun) */
static int worker(const options *o, int *argc, char ***argv) {
  if (ts_comm_init(argc, argv)) die("MPI init");
  ts_comm *w;
  if (ts_comm_world(&w)) die("world communicator");
  int rank = ts_comm_rank(w), size = ts_comm_size(w);
  trainer t;
  bench_model_opts mo = {.batch = batch_of(o, o->model), .seq = o->gpt_seq, .data_seed = (uint64_t)rank,
                         .amp_level = o->amp, .amp_dtype = TS_BF16};
  bench_model_build(&t, o->model, &mo);
  ts_grad_reducer *dp = NULL;
  int native = !strcmp(o->blocking, "native");
  if (ts_comm_set_blocking(w, native ? TS_COMM_BLOCKING_NATIVE : TS_COMM_BLOCKING_POLLED)) die("blocking mode");
  if (size > 1 && !o->alone) {
    ts_grad_reducer_config rc = {.bucket_mb = o->bucket_mb, .mean = 1, .wire = TS_F32, .allreduce = TS_ALLREDUCE_FLAT};
    if (ts_grad_reducer_create(w, t.ps, t.g, &rc, &dp)) die("data-parallel reducer");
    if (o->overlap && ts_grad_reducer_attach(dp, t.plan)) die("overlap hook");
  }
  float *grads = ts_params_grads(t.ps);
  int n = o->warmup + o->steps;
  double *ms = calloc((size_t)n, sizeof(double)), *wait = calloc((size_t)n, sizeof(double));
  for (int s = 0; s < n; s++) {
    if (size > 1 && ts_comm_barrier(w)) die("barrier");
    double t0 = ts_time_now();
    if (dp) ts_grad_reducer_begin(dp, grads);
    if (ts_plan_run(t.plan, (uint64_t)s)) die("training step");
    double t1 = ts_time_now();
    if (dp && ts_grad_reducer_finish(dp)) die("gradient all-reduce");
    double t2 = ts_time_now();
    if (ts_optim_step(t.opt, ts_params_data(t.ps), grads, t.lr)) die("optimizer step");
    ms[s] = (ts_time_now() - t0) * 1e3;
    if (getenv("BENCH_DP_TRACE") && s >= o->warmup)
      fprintf(stderr, "rank %d step %d: run %.3f finish %.3f optim %.3f ms\n", rank, s, (t1 - t0) * 1e3,
              (t2 - t1) * 1e3, (ts_time_now() - t2) * 1e3);
    wait[s] = dp ? ts_grad_reducer_wait_seconds(dp) * 1e3 : 0;
  }
  /* the slowest rank's time of each step; the waits of rank 0 */
  float *msf = malloc(sizeof(float) * (size_t)n);
  for (int s = 0; s < n; s++) msf[s] = (float)ms[s];
  if (size > 1 && ts_comm_allreduce(w, msf, msf, (size_t)n, TS_F32, TS_REDUCE_MAX)) die("reducing step times");
  for (int s = 0; s < n; s++) ms[s] = msf[s];
  double step = median(ms + o->warmup, o->steps), exposed = median(wait + o->warmup, o->steps);
  if (rank == 0) {
    printf("{\"name\":\"dp_run\",\"framework\":\"tessera\",\"model\":\"%s\",\"world\":%d,\"overlap\":%d,\"alone\":%d,"
           "\"blocking\":\"%s\",\"batch_per_rank\":%d,\"step_ms\":%.3f,\"wait_ms\":%.3f,\"samples_per_s\":%.2f,"
           "\"params\":%zu,\"buckets\":%d,\"bucket_mb\":%g,\"amp_level\":%d}\n",
           o->model, size, o->overlap, o->alone, o->blocking, mo.batch, step, exposed, 1e3 * size * mo.batch / step,
           ts_params_numel(t.ps), dp ? ts_grad_reducer_num_buckets(dp) : 0, o->bucket_mb, o->amp);
    fflush(stdout);
  }
  free(msf);
  free(ms);
  free(wait);
  ts_grad_reducer_free(dp);
  trainer_free(&t);
  ts_comm_finalize();
  return 0;
}

/* ---------------------------------------------------------------- driver */
/* Runs `cmd`, echoes its JSON lines, and reads the numbers under keys k1 (and k2) from the first
 * line that has them (NAN if none); non-zero if the command failed or k1 was not found. */
static int run_json(const char *cmd, const char *k1, double *v1, const char *k2, double *v2) {
  fprintf(stderr, "bench_dp: %s\n", cmd);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  char line[4096];
  *v1 = NAN;
  if (v2) *v2 = NAN;
  while (fgets(line, sizeof line, f)) {
    if (line[0] != '{') {
      fputs(line, stderr);
      continue;
    }
    fputs(line, stdout);
    fflush(stdout);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", k1);
    const char *p = strstr(line, pat);
    if (p && isnan(*v1)) *v1 = atof(p + strlen(pat));
    if (v2) {
      snprintf(pat, sizeof pat, "\"%s\":", k2);
      p = strstr(line, pat);
      if (p && isnan(*v2)) *v2 = atof(p + strlen(pat));
    }
  }
  int rc = pclose(f);
  return rc == 0 && !isnan(*v1) ? 0 : -1;
}

static void self_path(char *buf, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  if (n < 0) n = 0;
  buf[n] = 0;
}

#define MAXMODES 2
#define MAXROUNDS 16

static void bench_model(const options *o, const char *model, const char *self, const char *torch_script) {
  int B = batch_of(o, model);
  const char *mpirun = "mpirun --oversubscribe --allow-run-as-root";
  const char *env = "OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive";
  char common[512], cmd[2048], modes[64], *mode[MAXMODES];
  int nm = 0;
  snprintf(common, sizeof common,
           "--worker --model %s --warmup %d --steps %d --resnet-batch %d --gpt-batch %d --gpt-seq %d "
           "--mlp-batch %d --bucket-mb %g --amp O%d",
           model, o->warmup, o->steps, o->resnet_batch, o->gpt_batch, o->gpt_seq, o->mlp_batch, o->bucket_mb, o->amp);
  snprintf(modes, sizeof modes, "%s", o->blocking);
  char *save = NULL; /* strtok_r: main's loop over the models uses strtok */
  for (char *m = strtok_r(modes, ",", &save); m && nm < MAXMODES; m = strtok_r(NULL, ",", &save)) mode[nm++] = m;
  /* per round: the 1-rank step, per mode the N-rank steps and waits with and without overlap, alone */
  double step1[MAXROUNDS], alone[MAXROUNDS], stepn[MAXMODES][MAXROUNDS], wov[MAXMODES][MAXROUNDS],
      snov[MAXMODES][MAXROUNDS], wnov[MAXMODES][MAXROUNDS];
  for (int r = 0; r < o->rounds; r++) {
    snprintf(cmd, sizeof cmd, "%s %s -n 1 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY %s %s --overlap 1", env, mpirun, self,
             common);
    if (run_json(cmd, "step_ms", &step1[r], NULL, NULL)) die("the 1-rank run failed");
    for (int m = 0; m < nm; m++) {
      snprintf(cmd, sizeof cmd, "%s %s -n %d -x OMP_NUM_THREADS -x OMP_WAIT_POLICY %s %s --overlap 1 --blocking %s", env,
               mpirun, o->ranks, self, common, mode[m]);
      if (run_json(cmd, "step_ms", &stepn[m][r], "wait_ms", &wov[m][r])) die("the data-parallel run failed");
      snprintf(cmd, sizeof cmd, "%s %s -n %d -x OMP_NUM_THREADS -x OMP_WAIT_POLICY %s %s --overlap 0 --blocking %s", env,
               mpirun, o->ranks, self, common, mode[m]);
      if (run_json(cmd, "step_ms", &snov[m][r], "wait_ms", &wnov[m][r])) die("the no-overlap run failed");
    }
    snprintf(cmd, sizeof cmd, "%s %s -n %d -x OMP_NUM_THREADS -x OMP_WAIT_POLICY %s %s --alone 1", env, mpirun,
             o->ranks, self, common);
    if (run_json(cmd, "step_ms", &alone[r], NULL, NULL)) die("the independent-ranks run failed");
  }
  double tsps1 = NAN, tspsn = NAN;
  if (o->torch) {
    char targs[256];
    snprintf(targs, sizeof targs, "--model %s --batch %d --seq %d --warmup %d --steps %d --threads 1 --bucket-mb %g",
             model, B, o->gpt_seq, o->warmup, o->steps, o->torch_bucket_mb);
    snprintf(cmd, sizeof cmd, "%s %s %s %s --world 1", env, TORCH_PY, torch_script, targs);
    if (run_json(cmd, "samples_per_s", &tsps1, NULL, NULL)) fprintf(stderr, "bench_dp: PyTorch 1-process run failed\n");
    snprintf(cmd, sizeof cmd, "%s %s %s %s --world %d", env, TORCH_PY, torch_script, targs, o->ranks);
    if (run_json(cmd, "samples_per_s", &tspsn, NULL, NULL)) fprintf(stderr, "bench_dp: PyTorch DDP run failed\n");
  }
  int R = o->rounds;
  double s1 = median(step1, R), sa = median(alone, R);
  for (int m = 0; m < nm; m++) {
    double sn = median(stepn[m], R), wo = median(wov[m], R), sno = median(snov[m], R), wno = median(wnov[m], R);
    double sps1 = 1e3 * B / s1, spsn = 1e3 * B * o->ranks / sn;
    double eff = spsn / (o->ranks * sps1), teff = tspsn / (o->ranks * tsps1);
    /* Hidden: the part of the communication time (the no-overlap run's wait) that did not lengthen
     * the step beyond the 1-rank step. On a core per rank, moving and summing the data through
     * shared memory is work of that same core, so polling during backward mostly moves it there. */
    double hidden = wno > 0 ? 1.0 - (sn - s1) / wno : NAN;
    if (hidden < 0) hidden = 0;
    printf("{\"name\":\"dp_scaling\",\"model\":\"%s\",\"ranks\":%d,\"blocking\":\"%s\",\"rounds\":%d,"
           "\"batch_per_rank\":%d,\"tessera_1x1_sps\":%.2f,\"tessera_sps\":%.2f,\"tessera_efficiency\":%.4f,"
           "\"alone_efficiency\":%.4f,\"dp_vs_alone\":%.4f,\"step_ms\":%.3f,\"comm_ms\":%.3f,\"comm_share\":%.4f,"
           "\"exposed_ms\":%.3f,\"hidden\":%.4f,\"torch_1x1_sps\":%.2f,\"torch_sps\":%.2f,"
           "\"torch_efficiency\":%.4f,\"efficiency_vs_torch\":%.4f}\n",
           model, o->ranks, mode[m], R, B, sps1, spsn, eff, s1 / sa, sa / sn, sn, wno, sno > 0 ? wno / sno : NAN, wo,
           hidden, tsps1, tspsn, teff, eff / teff);
  }
  fflush(stdout);
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_dp [--models resnet18,gpt,mlp] [--warmup N] [--steps N] [--ranks N]\n"
          "                [--resnet-batch B] [--gpt-batch B] [--gpt-seq T] [--mlp-batch B]\n"
          "                [--bucket-mb M] [--torch-bucket-mb M] [--no-torch]\n"
          "                [--blocking native,polled] [--rounds K] [--amp O0|O1|O2|O3]\n");
  exit(2);
}

int main(int argc, char **argv) {
  bench_prog = "bench_dp";
  options o = {.warmup = 2, .steps = 8, .ranks = 2, .resnet_batch = 64, .gpt_batch = 8, .gpt_seq = 256,
               .mlp_batch = 128, .bucket_mb = 4, .torch_bucket_mb = 25, .torch = 1,
               .models = "resnet18,gpt,mlp", .model = "mlp", .overlap = 1, .blocking = "native,polled",
               .rounds = 1};
  int is_worker = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
    if (!strcmp(a, "--worker")) is_worker = 1;
    else if (!strcmp(a, "--no-torch")) o.torch = 0;
    else if (ARG("--models")) o.models = v;
    else if (ARG("--model")) o.model = v;
    else if (ARG("--overlap")) o.overlap = atoi(v);
    else if (ARG("--alone")) o.alone = atoi(v);
    else if (ARG("--blocking")) o.blocking = v;
    else if (ARG("--rounds")) o.rounds = atoi(v);
    else if (ARG("--warmup")) o.warmup = atoi(v);
    else if (ARG("--steps")) o.steps = atoi(v);
    else if (ARG("--ranks")) o.ranks = atoi(v);
    else if (ARG("--resnet-batch")) o.resnet_batch = atoi(v);
    else if (ARG("--gpt-batch")) o.gpt_batch = atoi(v);
    else if (ARG("--gpt-seq")) o.gpt_seq = atoi(v);
    else if (ARG("--mlp-batch")) o.mlp_batch = atoi(v);
    else if (ARG("--bucket-mb")) o.bucket_mb = atof(v);
    else if (ARG("--torch-bucket-mb")) o.torch_bucket_mb = atof(v);
    else if (ARG("--amp")) o.amp = (v[0] == 'O' || v[0] == 'o') && v[1] >= '0' && v[1] <= '3' && !v[2] ? v[1] - '0' : -1;
    else usage();
#undef ARG
  }
  if (o.steps < 1 || o.warmup < 0 || o.ranks < 2 || o.rounds < 1 || o.rounds > MAXROUNDS || o.amp < 0) usage();
  if (is_worker && strchr(o.blocking, ',')) o.blocking = "native"; /* runs without a reducer */
  if (is_worker && strcmp(o.blocking, "native") && strcmp(o.blocking, "polled")) usage();
  if (is_worker) return worker(&o, &argc, &argv);
  char self[1024], script[1200];
  self_path(self, sizeof self);
  /* bench/torch_ddp.py next to the sources: build/bench_dp -> ../bench/torch_ddp.py */
  snprintf(script, sizeof script, "%s", self);
  char *slash = strrchr(script, '/');
  if (slash) *slash = 0;
  strncat(script, "/../bench/torch_ddp.py", sizeof script - strlen(script) - 1);
  if (o.torch && (access(TORCH_PY, X_OK) || access(script, R_OK) ||
                  system(TORCH_PY " -c 'import torch' 2>/dev/null") != 0)) {
    fprintf(stderr, "bench_dp: PyTorch not available (%s, %s): Tessera only\n", TORCH_PY, script);
    o.torch = 0;
  }
  char models[256];
  snprintf(models, sizeof models, "%s", o.models);
  for (char *m = strtok(models, ","); m; m = strtok(NULL, ",")) bench_model(&o, m, self, script);
  return 0;
}
