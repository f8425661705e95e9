/* bench_step: Tessera performance numbers as JSON lines (one object per line on stdout).
 *
 *   {"name":"sgemm_1024","gflops":..,"tessera_gflops":..,"onednn_gflops":..,"ratio":..}
 *   {"name":"sgemm_4096x768x768",...}            ts_matmul graph vs raw dnnl_sgemm (M x K x N)
 *   {"name":"resnet18_cifar_b64_step","threads":N,"tessera_ms":..,"torch_ms":..,"ratio":..}
 *   {"name":"gpt_6l_384d_step",...}              one full training step (forward, backward,
 *                                                optimizer update); ratio = torch_ms/tessera_ms
 *   {"name":"profile","model":..,"op":..,"ms":..,"share":..}   with --profile
 *   {"name":"gpt_6l_384d_step_amp","f32_ms":..,"amp_ms":..,"speedup":..}   with --amp O2: the
 *                                                same model in f32 and mixed precision, steps
 *                                                alternating; --profile adds both models' per-op
 *                                                tables and conv's reorder/primitive split;
 *                                                --conv-native a third model, amp with every
 *                                                bf16 conv on oneDNN's bf16 primitive
 *                                                ("amp_conv_native_ms"); --no-fusion: the amp
 *                                                plans without the executor's fusions; also the
 *                                                median CPU time (whole process) of the steps and
 *                                                its ratio "cpu_speedup", which other jobs' load
 *                                                disturbs less than wall time
 *   {"name":"..._fusion","f32_ms":..,"f32_nofusion_ms":..,"f32_gain":..,"amp_ms":..,...}  with
 *                                                --fusion-ab (only this, --amp default O2): f32
 *                                                and amp each with and without the executor's
 *                                                fusions, steps of the four interleaved; gain =
 *                                                unfused/fused; planned arenas; the fusions
 *                                                taken per step
 *   {"name":"gpt_6l_384d_eval_fusion","f32_ms":..,"f32_nofusion_ms":..,...}  with --eval-fusion-ab
 *                                                (only this, --amp default O2): the GPT's
 *                                                evaluation forward (logits, no backward: the
 *                                                matmul+bias+gelu fusion applies) in f32 and at
 *                                                --amp, each fused and unfused, runs of the four
 *                                                interleaved; gain = unfused/fused; the fusions
 *                                                taken per run; max |logits fused - unfused|
 *   with --amp and PyTorch, the model rows also get "tessera_amp_ms", "torch_autocast_bf16_ms"
 *   (torch_step.py --amp bf16: the forward under torch.autocast), "torch_best" (f32 or
 *   autocast_bf16, the faster), "torch_best_ms" and "amp_ratio" = torch_best_ms/tessera_amp_ms
 *
 * Steps: --warmup steps, then the median of --steps individually timed steps. The PyTorch side
 * (bench/torch_step.py under /usr/bin/python3) runs in the same invocation with the same thread
 * count, OMP_WAIT_POLICY=passive, large-malloc glibc tunables, and OPENBLAS_CORETYPE both as set
 * in the environment and unset (the faster counts). Diagnostics go to stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl.h"
#include "bench_common.h"
#include "kernels/conv.h"

#define TORCH_PY "/usr/bin/python3"
#define GLIBC_TUNE "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"

typedef struct {
  int threads, warmup, steps, gemm_reps;
  int torch; /* -1 auto, 0 off, 1 on */
  int profile;
  int do_sgemm, do_resnet, do_gpt;
  int resnet_batch, gpt_batch, gpt_seq;
  int conv_native;    /* --conv-native: with --amp, a third model: amp with every bf16 conv native */
  int amp_level;      /* --amp O1..O3: also time each model in mixed precision against f32 */
  ts_dtype amp_dtype; /* --amp-dtype bf16|f16 */
  int no_fusion;      /* --no-fusion: the amp models' plans without the executor's fusions */
  int fusion_ab;      /* --fusion-ab: f32 and --amp, each with and without fusions, interleaved */
  int eval_fusion_ab; /* --eval-fusion-ab: the same for the GPT's evaluation forward */
  const char *torch_script;
} options;


/* ---------------------------------------------------------------- sgemm */

static double time_tessera_gemm(int64_t M, int64_t K, int64_t N, int reps) {
  ts_graph *g;
  if (ts_graph_create(&g)) die("graph");
  ts_val a = ts_input(g, "a", TS_F32, ts_shape2(M, K));
  ts_val b = ts_input(g, "b", TS_F32, ts_shape2(K, N));
  ts_val y = ts_matmul(g, a, b, 0, 0);
  if (ts_graph_status(g)) die("building the matmul graph");
  ts_plan *p;
  if (ts_plan_create(g, &y, 1, &p)) die("planning the matmul graph");
  float *A = ts_alloc(sizeof(float) * (size_t)(M * K)), *B = ts_alloc(sizeof(float) * (size_t)(K * N));
  if (!A || !B) die("allocating gemm operands");
  fill_uniform(A, (size_t)(M * K), 1);
  fill_uniform(B, (size_t)(K * N), 2);
  if (ts_plan_bind(p, a, A) || ts_plan_bind(p, b, B)) die("binding gemm operands");
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < 2; i++)
    if (ts_plan_run(p, 0)) die("running ts_matmul");
  for (int i = 0; i < reps; i++) {
    double t0 = ts_time_now();
    if (ts_plan_run(p, 0)) die("running ts_matmul");
    t[i] = ts_time_now() - t0;
  }
  double s = median(t, reps);
  free(t);
  ts_free(A);
  ts_free(B);
  ts_plan_free(p);
  ts_graph_free(g);
  return 2.0 * (double)M * (double)N * (double)K / s * 1e-9;
}

static double time_onednn_gemm(int64_t M, int64_t K, int64_t N, int reps) {
  float *A = ts_alloc(sizeof(float) * (size_t)(M * K)), *B = ts_alloc(sizeof(float) * (size_t)(K * N));
  float *C = ts_alloc(sizeof(float) * (size_t)(M * N));
  if (!A || !B || !C) die("allocating gemm operands");
  fill_uniform(A, (size_t)(M * K), 1);
  fill_uniform(B, (size_t)(K * N), 2);
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = -2; i < reps; i++) {
    double t0 = ts_time_now();
    if (dnnl_sgemm('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N) != dnnl_success) {
      fprintf(stderr, "bench_step: dnnl_sgemm failed\n");
      exit(1);
    }
    if (i >= 0) t[i] = ts_time_now() - t0;
  }
  double s = median(t, reps);
  free(t);
  ts_free(A);
  ts_free(B);
  ts_free(C);
  return 2.0 * (double)M * (double)N * (double)K / s * 1e-9;
}

static void bench_gemm(const char *name, int64_t M, int64_t K, int64_t N, int reps) {
  /* alternating rounds, the better median of each side: the first timed loop after a change of
   * thread count or working set runs measurably slower on this VM whichever side it is */
  double tg = 0, og = 0;
  for (int round = 0; round < 2; round++) {
    double x = round ? time_tessera_gemm(M, K, N, reps) : time_onednn_gemm(M, K, N, reps);
    double y = round ? time_onednn_gemm(M, K, N, reps) : time_tessera_gemm(M, K, N, reps);
    double t = round ? x : y, o = round ? y : x;
    tg = t > tg ? t : tg;
    og = o > og ? o : og;
  }
  printf("{\"name\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,\"gflops\":%.2f,\"tessera_gflops\":%.2f,"
         "\"onednn_gflops\":%.2f,\"ratio\":%.4f}\n",
         name, (long long)M, (long long)K, (long long)N, tg, tg, og, tg / og);
  fflush(stdout);
}

/* ---------------------------------------------------------------- training steps */

#define MAX_PROF 512
typedef struct {
  const char *op[MAX_PROF];
  double sec[MAX_PROF];
  int n;
  double t0;
} profile;

static void prof_add(profile *pr, const char *op, double dt) {
  int i = 0;
  while (i < pr->n && strcmp(pr->op[i], op)) i++;
  if (i == pr->n) {
    if (pr->n == MAX_PROF) return;
    pr->op[pr->n++] = op;
  }
  pr->sec[i] += dt;
}

/* Plan hook: time of each node, summed per op name. */
static void prof_hook(const ts_hook_info *e, void *user) {
  profile *pr = user;
  if (e->event == TS_HOOK_NODE_BEGIN)
    pr->t0 = ts_time_now();
  else if (e->event == TS_HOOK_NODE_END)
    prof_add(pr, getenv("BENCH_DETAIL") && strstr(getenv("BENCH_DETAIL"), e->op_name) ? e->node_name : e->op_name,
             ts_time_now() - pr->t0);
}


/* One training step: forward + backward (gradients land in the store), then the update. */
static void train_step(trainer *t, uint64_t step, profile *pr) {
  if (ts_plan_run(t->plan, step)) die("running the training step");
  double t0 = pr ? ts_time_now() : 0;
  if (ts_optim_step(t->opt, ts_params_data(t->ps), ts_params_grads(t->ps), t->lr))
    die("optimizer step");
  if (pr) prof_add(pr, "optimizer_step", ts_time_now() - t0);
}

/* Warm-up, then the median of `steps` timed steps (ms); the last loss in *loss. With `model`
 * set, also a profiled pass of the same number of steps (hook installed only then). */
static double time_training(trainer *t, const options *o, const char *model, float *loss) {
  uint64_t s = 0;
  for (int i = 0; i < o->warmup; i++) train_step(t, s++, NULL);
  double *ms = malloc(sizeof(double) * (size_t)o->steps);
  for (int i = 0; i < o->steps; i++) {
    double t0 = ts_time_now();
    train_step(t, s++, NULL);
    ms[i] = (ts_time_now() - t0) * 1e3;
  }
  double med = median(ms, o->steps);
  free(ms);
  *loss = *(float *)ts_plan_data(t->plan, t->loss);
  if (o->profile) {
    profile pr;
    memset(&pr, 0, sizeof pr);
    if (ts_plan_add_hook(t->plan, prof_hook, &pr)) die("profiler hook");
    for (int i = 0; i < o->steps; i++) train_step(t, s++, &pr);
    ts_plan_remove_hook(t->plan, prof_hook, &pr);
    double total = 0;
    for (int i = 0; i < pr.n; i++) total += pr.sec[i];
    for (int i = 0; i < pr.n; i++) /* sort by time, descending */
      for (int j = i + 1; j < pr.n; j++)
        if (pr.sec[j] > pr.sec[i]) {
          double ts_ = pr.sec[i]; pr.sec[i] = pr.sec[j]; pr.sec[j] = ts_;
          const char *to = pr.op[i]; pr.op[i] = pr.op[j]; pr.op[j] = to;
        }
    for (int i = 0; i < pr.n; i++)
      printf("{\"name\":\"profile\",\"model\":\"%s\",\"op\":\"%s\",\"ms\":%.3f,\"share\":%.4f}\n",
             model, pr.op[i], pr.sec[i] * 1e3 / o->steps, total > 0 ? pr.sec[i] / total : 0.0);
    fflush(stdout);
  }
  return med;
}

typedef struct {
  char name[64];
  double tessera_ms, torch_ms, torch_ms_env, torch_ms_unset;
  double amp_ms, torch_amp_ms; /* --amp: Tessera's mixed-precision step; torch's bf16 autocast step */
  float loss;
  int64_t params;
  int batch, seq;
} result;

static void bench_resnet(const options *o, result *r) {
  trainer t;
  bench_model_opts mo = {.batch = o->resnet_batch};
  bench_model_build(&t, "resnet18", &mo);
  snprintf(r->name, sizeof r->name, "resnet18_cifar_b%d_step", o->resnet_batch);
  r->params = (int64_t)ts_params_numel(t.ps);
  r->batch = o->resnet_batch;
  r->seq = 0;
  r->tessera_ms = time_training(&t, o, "resnet18_cifar", &r->loss);
  trainer_free(&t);
}

static void bench_gpt(const options *o, result *r) {
  trainer t;
  bench_model_opts mo = {.batch = o->gpt_batch, .seq = o->gpt_seq};
  bench_model_build(&t, "gpt", &mo);
  snprintf(r->name, sizeof r->name, "gpt_6l_384d_step");
  r->params = (int64_t)ts_params_numel(t.ps);
  r->batch = o->gpt_batch;
  r->seq = o->gpt_seq;
  r->tessera_ms = time_training(&t, o, "gpt_6l_384d", &r->loss);
  trainer_free(&t);
}

/* ---------------------------------------------------------------- mixed precision */

/* One step of an amp model; native: with every bf16 conv direction on oneDNN's bf16 primitive
 * (ts__conv_dnnl_set_lp_mode; the default rule restored after). */
static void amp_step(trainer *t, uint64_t step, int native) {
  for (int d = 0; native && d < 3; d++) ts__conv_dnnl_set_lp_mode(d, TS_CONV_LP_NATIVE);
  train_step(t, step, NULL);
  for (int d = 0; native && d < 3; d++) ts__conv_dnnl_set_lp_mode(d, TS_CONV_LP_DEFAULT);
}

/* Model `model` in f32 and at --amp, steps alternating between the two (f32, amp, f32, amp...)
 * so both see the same machine; the medians and the speedup f32/amp. */
/* CPU seconds of the whole process (every thread): a step's CPU time is the work it did, which
 * other jobs on the machine disturb far less than its wall time (a thread that waits for a core,
 * or sleeps at a barrier under OMP_WAIT_POLICY=passive, is not charged). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench_amp(const options *o, const char *model, const char *name, int batch, int seq) {
  trainer t[3];
  const int nk = o->conv_native ? 3 : 2; /* 3: a second amp model whose bf16 convs all run native */
  for (int k = 0; k < nk; k++) {
    bench_model_opts mo = {batch, seq, 0, k ? o->amp_level : 0, o->amp_dtype};
    bench_model_build(&t[k], model, &mo);
    if (k && o->no_fusion) ts_plan_set_fusion(t[k].plan, 0);
  }
  uint64_t s = 0;
  for (int i = 0; i < o->warmup; i++, s++)
    for (int k = 0; k < nk; k++) amp_step(&t[k], s, k == 2);
  double *ms[3] = {malloc(sizeof(double) * (size_t)o->steps), malloc(sizeof(double) * (size_t)o->steps),
                   malloc(sizeof(double) * (size_t)o->steps)};
  double *cpu[2] = {malloc(sizeof(double) * (size_t)o->steps), malloc(sizeof(double) * (size_t)o->steps)};
  for (int i = 0; i < o->steps; i++, s++)
    for (int k = 0; k < nk; k++) {
      double t0 = ts_time_now(), c0 = cpu_now();
      amp_step(&t[k], s, k == 2);
      ms[k][i] = (ts_time_now() - t0) * 1e3;
      if (k < 2) cpu[k][i] = (cpu_now() - c0) * 1e3;
    }
  double f32 = median(ms[0], o->steps), amp = median(ms[1], o->steps);
  double f32c = median(cpu[0], o->steps), ampc = median(cpu[1], o->steps);
  double nat = nk == 3 ? median(ms[2], o->steps) : 0;
  float l0 = *(float *)ts_plan_data(t[0].plan, t[0].loss), l1 = *(float *)ts_plan_data(t[1].plan, t[1].loss);
  if (o->profile) { /* per op of each model, steps alternating as above; conv's time split */
      profile pr[2];
      double cs[2][3][3];
      memset(pr, 0, sizeof pr);
      for (int j = 0; j < 2; j++)
        if (ts_plan_add_hook(t[j].plan, prof_hook, &pr[j])) die("profiler hook");
      double conv[2][3][3] = {{{0}}}, wino[2][3] = {{0}}, ws[3][3];
      for (int i = 0; i < o->steps; i++, s++)
        for (int j = 0; j < 2; j++) {
          ts__conv_dnnl_stats(NULL, 1);
          ts__conv_wino_stats(NULL, 1);
          train_step(&t[j], s, &pr[j]);
          ts__conv_dnnl_stats(cs, 1);
          ts__conv_wino_stats(ws, 1);
          for (int d = 0; d < 3; d++)
            for (int q = 0; q < 3; q++) conv[j][d][q] += cs[0][d][q] + cs[1][d][q], wino[j][d] += ws[d][q];
        }
      for (int j = 0; j < 2; j++) ts_plan_remove_hook(t[j].plan, prof_hook, &pr[j]);
      for (int j = 0; j < 2; j++) {
        double total = 0;
        for (int i = 0; i < pr[j].n; i++) total += pr[j].sec[i];
        for (int i = 0; i < pr[j].n; i++)
          printf("{\"name\":\"profile\",\"model\":\"%s\",\"variant\":\"%s\",\"op\":\"%s\",\"ms\":%.3f,"
                 "\"share\":%.4f}\n",
                 name, j ? "amp" : "f32", pr[j].op[i], pr[j].sec[i] * 1e3 / o->steps,
                 total > 0 ? pr[j].sec[i] / total : 0.0);
        static const char *dn[3] = {"fwd", "bwd_data", "bwd_weight"};
        /* wino_ms: the part of the three that is the bf16 Winograd kernels (conv_wino.c: their
         * transforms count as reorders, their GEMMs as the primitive) */
        for (int d = 0; d < 3; d++)
          printf("{\"name\":\"conv_split\",\"model\":\"%s\",\"variant\":\"%s\",\"dir\":\"%s\","
                 "\"reorder_in_ms\":%.3f,\"primitive_ms\":%.3f,\"reorder_out_ms\":%.3f,\"wino_ms\":%.3f}\n",
                 name, j ? "amp" : "f32", dn[d], conv[j][d][0] * 1e3 / o->steps,
                 conv[j][d][1] * 1e3 / o->steps, conv[j][d][2] * 1e3 / o->steps, wino[j][d] * 1e3 / o->steps);
        printf("{\"name\":\"profile_total\",\"model\":\"%s\",\"variant\":\"%s\",\"ms\":%.3f}\n", name,
               j ? "amp" : "f32", total * 1e3 / o->steps);
      }
      fflush(stdout);
    }
  printf("{\"name\":\"%s_amp\",\"threads\":%d,\"batch\":%d,\"amp_level\":\"O%d\",\"amp_dtype\":\"%s\","
         "\"f32_ms\":%.3f,\"amp_ms\":%.3f,\"speedup\":%.4f,\"f32_cpu_ms\":%.3f,\"amp_cpu_ms\":%.3f,"
         "\"cpu_speedup\":%.4f,\"f32_loss\":%.6g,\"amp_loss\":%.6g",
         name, o->threads, batch, o->amp_level, ts_dtype_name(o->amp_dtype), f32, amp, f32 / amp, f32c, ampc,
         f32c / ampc, (double)l0, (double)l1);
  if (nk == 3) printf(",\"amp_conv_native_ms\":%.3f,\"speedup_conv_native\":%.4f", nat, f32 / nat);
  printf("}\n");
  fflush(stdout);
  for (int k = 0; k < nk; k++) trainer_free(&t[k]);
  for (int k = 0; k < 3; k++) free(ms[k]);
  free(cpu[0]);
  free(cpu[1]);
  return amp;
}

/* --fusion-ab: `model` in f32 and at --amp, each with the executor's fusions and without
 * (ts_plan_set_fusion(p, 0)), steps of the four alternating; the medians, the gains (unfused /
 * fused) and the fusions each fused plan takes per step. */
static void bench_fusion_ab(const options *o, const char *model, const char *name, int batch, int seq) {
  trainer t[4]; /* f32, f32 unfused, amp, amp unfused */
  for (int k = 0; k < 4; k++) {
    bench_model_opts mo = {batch, seq, 0, k >= 2 ? o->amp_level : 0, o->amp_dtype};
    bench_model_build(&t[k], model, &mo);
    if (k % 2) ts_plan_set_fusion(t[k].plan, 0);
  }
  uint64_t s = 0;
  for (int i = 0; i < o->warmup; i++, s++)
    for (int k = 0; k < 4; k++) train_step(&t[k], s, NULL);
  double *ms = malloc(sizeof(double) * (size_t)(4 * o->steps)), med[4];
  for (int i = 0; i < o->steps; i++, s++)
    for (int k = 0; k < 4; k++) {
      double t0 = ts_time_now();
      train_step(&t[k], s, NULL);
      ms[k * o->steps + i] = (ts_time_now() - t0) * 1e3;
    }
  for (int k = 0; k < 4; k++) med[k] = median(ms + k * o->steps, o->steps);
  printf("{\"name\":\"%s_fusion\",\"threads\":%d,\"amp_level\":\"O%d\",\"f32_ms\":%.3f,\"f32_nofusion_ms\":%.3f,"
         "\"f32_gain\":%.4f,\"amp_ms\":%.3f,\"amp_nofusion_ms\":%.3f,\"amp_gain\":%.4f,\"amp_speedup\":%.4f",
         name, o->threads, o->amp_level, med[0], med[1], med[1] / med[0], med[2], med[3], med[3] / med[2],
         med[0] / med[2]);
  printf(",\"f32_arena_mb\":%.2f,\"f32_nofusion_arena_mb\":%.2f,\"amp_arena_mb\":%.2f,\"amp_nofusion_arena_mb\":%.2f",
         ts_plan_peak_bytes(t[0].plan) / 1048576.0, ts_plan_peak_bytes(t[1].plan) / 1048576.0,
         ts_plan_peak_bytes(t[2].plan) / 1048576.0, ts_plan_peak_bytes(t[3].plan) / 1048576.0);
  static const char *fn[TS_FUSION_COUNT] = {"matmul_cast", "bn_relu", "bn_relu_bwd", "matmul_bias_gelu"};
  for (int f = 0; f < TS_FUSION_COUNT; f++)
    printf(",\"f32_%s\":%d,\"amp_%s\":%d", fn[f], ts_plan_fusions_taken(t[0].plan, (ts_fusion)f), fn[f],
           ts_plan_fusions_taken(t[2].plan, (ts_fusion)f));
  printf("}\n");
  fflush(stdout);
  for (int k = 0; k < 4; k++) trainer_free(&t[k]);
  free(ms);
}

/* --eval-fusion-ab: the GPT's evaluation forward (graph in inference mode, plan keeps the logits
 * only, no backward), as the trainer's eval pass and `tessera eval` plan it, in f32 and at --amp,
 * each with the executor's fusions and without, runs of the four interleaved. */
typedef struct {
  ts_graph *g;
  ts_params *ps;
  ts_plan *plan;
  ts_val logits;
  int32_t *ids;
} evaluator;

static void eval_build(evaluator *e, int amp_level, ts_dtype amp_dtype, int batch, int seq) {
  const int V = 8192;
  memset(e, 0, sizeof *e);
  if (ts_graph_create(&e->g) || ts_params_create(&e->ps)) die("creating the graph");
  ts_graph_set_training(e->g, 0);
  ts_nn nn = {e->g, e->ps};
  ts_val x = ts_input(e->g, "ids", TS_I32, ts_shape2(batch, seq));
  ts_gpt_config cfg = {.vocab_size = V, .block_size = seq, .n_layer = 6, .n_head = 6, .n_embd = 384};
  if (ts_zoo_gpt(&nn, &cfg, x, TS_NONE, &e->logits, NULL)) die("building the GPT");
  if (amp_level > 0) {
    ts_val v[2] = {x, e->logits};
    if (ts_graph_amp(e->g, amp_level, amp_dtype, v, 2)) die("the amp pass");
    x = v[0], e->logits = v[1];
  }
  if (ts_params_alloc(e->ps, 1234)) die("allocating parameters");
  if (ts_plan_create(e->g, &e->logits, 1, &e->plan)) die("planning the evaluation forward");
  if (ts_params_bind(e->ps, e->g, e->plan)) die("binding parameters");
  e->ids = ts_alloc(sizeof(int32_t) * (size_t)batch * (size_t)seq);
  uint64_t key = ts_hash_name("gpt-batch", 7);
  for (int64_t i = 0; i < (int64_t)batch * seq; i++) e->ids[i] = (int32_t)(ts_rng_uniform_at(key, (uint64_t)(2 * i)) * V) % V;
  if (ts_plan_bind(e->plan, x, e->ids)) die("binding the batch");
}

static void bench_eval_fusion_ab(const options *o, int batch, int seq) {
  evaluator e[4]; /* f32, f32 unfused, amp, amp unfused */
  for (int k = 0; k < 4; k++) {
    eval_build(&e[k], k >= 2 ? o->amp_level : 0, o->amp_dtype, batch, seq);
    if (k % 2) ts_plan_set_fusion(e[k].plan, 0);
  }
  for (int i = 0; i < o->warmup; i++)
    for (int k = 0; k < 4; k++)
      if (ts_plan_run(e[k].plan, 0)) die("running the evaluation forward");
  double *ms = malloc(sizeof(double) * (size_t)(4 * o->steps)), med[4];
  for (int i = 0; i < o->steps; i++)
    for (int k = 0; k < 4; k++) {
      double t0 = ts_time_now();
      if (ts_plan_run(e[k].plan, 0)) die("running the evaluation forward");
      ms[k * o->steps + i] = (ts_time_now() - t0) * 1e3;
    }
  for (int k = 0; k < 4; k++) med[k] = median(ms + k * o->steps, o->steps);
  if (o->profile) { /* per op of each plan, runs interleaved as above */
    static const char *vn[4] = {"f32", "f32_nofusion", "amp", "amp_nofusion"};
    profile pr[4];
    memset(pr, 0, sizeof pr);
    for (int k = 0; k < 4; k++)
      if (ts_plan_add_hook(e[k].plan, prof_hook, &pr[k])) die("profiler hook");
    double wall[4] = {0, 0, 0, 0};
    for (int i = 0; i < o->steps; i++)
      for (int k = 0; k < 4; k++) {
        double t0 = ts_time_now();
        if (ts_plan_run(e[k].plan, 0)) die("running the evaluation forward");
        wall[k] += ts_time_now() - t0;
      }
    for (int k = 0; k < 4; k++) {
      ts_plan_remove_hook(e[k].plan, prof_hook, &pr[k]);
      printf("{\"name\":\"profile_total\",\"model\":\"gpt_6l_384d_eval\",\"variant\":\"%s\",\"ms\":%.3f}\n", vn[k],
             wall[k] * 1e3 / o->steps);
      for (int i = 0; i < pr[k].n; i++)
        printf("{\"name\":\"profile\",\"model\":\"gpt_6l_384d_eval\",\"variant\":\"%s\",\"op\":\"%s\",\"ms\":%.3f}\n",
               vn[k], pr[k].op[i], pr[k].sec[i] * 1e3 / o->steps);
    }
  }
  double d[2] = {0, 0}, mx[2] = {0, 0}; /* max |fused - unfused| and max |unfused| of the logits */
  const size_t nl = (size_t)batch * (size_t)seq * 8192;
  for (int j = 0; j < 2; j++) {
    const float *f = ts_plan_data(e[2 * j].plan, e[2 * j].logits), *u = ts_plan_data(e[2 * j + 1].plan, e[2 * j + 1].logits);
    for (size_t i = 0; i < nl; i++) d[j] = fmax(d[j], fabs((double)f[i] - u[i])), mx[j] = fmax(mx[j], fabs((double)u[i]));
  }
  printf("{\"name\":\"gpt_6l_384d_eval_fusion\",\"threads\":%d,\"batch\":%d,\"seq\":%d,\"amp_level\":\"O%d\","
         "\"f32_ms\":%.3f,\"f32_nofusion_ms\":%.3f,\"f32_gain\":%.4f,\"amp_ms\":%.3f,\"amp_nofusion_ms\":%.3f,"
         "\"amp_gain\":%.4f,\"f32_matmul_bias_gelu\":%d,\"amp_matmul_bias_gelu\":%d,"
         "\"f32_max_logit_diff\":%.3g,\"amp_max_logit_diff\":%.3g,\"f32_max_logit\":%.3g,\"amp_max_logit\":%.3g}\n",
         o->threads, batch, seq, o->amp_level, med[0], med[1], med[1] / med[0], med[2], med[3], med[3] / med[2],
         ts_plan_fusions_taken(e[0].plan, TS_FUSION_MATMUL_BIAS_GELU),
         ts_plan_fusions_taken(e[2].plan, TS_FUSION_MATMUL_BIAS_GELU), d[0], d[1], mx[0], mx[1]);
  fflush(stdout);
  for (int k = 0; k < 4; k++) {
    ts_plan_free(e[k].plan);
    ts_params_free(e[k].ps);
    ts_graph_free(e[k].g);
    ts_free(e[k].ids);
  }
  free(ms);
}

/* ---------------------------------------------------------------- PyTorch */

static int torch_available(void) {
  return system(TORCH_PY " -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Runs torch_step.py once; fills ms[k] for results whose name it prints (-1 otherwise), and with
 * --amp bf16 ms_amp[k] for its `<name>_autocast_bf16` rows. */
static int run_torch(const options *o, int unset_coretype, result *res, int nres, double *ms, double *ms_amp) {
  char only[32] = "";
  if (o->do_resnet) strcat(only, "resnet,");
  if (o->do_gpt) strcat(only, "gpt");
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "env %s OMP_NUM_THREADS=%d OMP_WAIT_POLICY=passive GLIBC_TUNABLES=%s " TORCH_PY
           " '%s' --threads %d --warmup %d --steps %d --only %s --resnet-batch %d --gpt-batch %d"
           " --gpt-seq %d%s",
           unset_coretype ? "-u OPENBLAS_CORETYPE" : "", o->threads, GLIBC_TUNE, o->torch_script,
           o->threads, o->warmup, o->steps, only, o->resnet_batch, o->gpt_batch, o->gpt_seq,
           o->amp_level && o->amp_dtype == TS_BF16 ? " --amp bf16" : "");
  for (int i = 0; i < nres; i++) ms[i] = ms_amp[i] = -1;
  FILE *f = popen(cmd, "r");
  if (!f) {
    fprintf(stderr, "bench_step: cannot run %s\n", cmd);
    return -1;
  }
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    const char *n = strstr(line, "\"name\": \""), *m = strstr(line, "\"ms\": ");
    if (!n || !m) continue;
    n += 9;
    for (int i = 0; i < nres; i++) {
      size_t len = strlen(res[i].name);
      if (!strncmp(n, res[i].name, len) && n[len] == '"') ms[i] = atof(m + 6);
      if (!strncmp(n, res[i].name, len) && !strncmp(n + len, "_autocast_bf16\"", 15)) ms_amp[i] = atof(m + 6);
    }
  }
  int rc = pclose(f);
  if (rc) fprintf(stderr, "bench_step: %s exited with status %d\n", o->torch_script, rc);
  return rc;
}

/* ---------------------------------------------------------------- main */

static void usage(void) {
  fprintf(stderr,
          "usage: bench_step [--threads N] [--warmup N] [--steps N] [--gemm-reps N] [--profile]\n"
          "                  [--torch | --no-torch] [--torch-script PATH] [--only sgemm,resnet,gpt]\n"
          "                  [--resnet-batch N] [--gpt-batch N] [--gpt-seq N]\n"
          "                  [--amp O1|O2|O3] [--amp-dtype bf16|f16] [--conv-native]\n"
          "                  [--no-fusion] [--fusion-ab] [--eval-fusion-ab]\n");
}

static int parse_int(const char *opt, const char *s, int lo) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || *end || v < lo || v > 1 << 20) {
    fprintf(stderr, "bench_step: %s needs an integer >= %d (got '%s')\n", opt, lo, s ? s : "");
    exit(2);
  }
  return (int)v;
}

int main(int argc, char **argv) {
  bench_prog = "bench_step";
  options o = {0};
  const char *env = getenv("OMP_NUM_THREADS");
  o.threads = env && atoi(env) > 0 ? atoi(env) : 1;
  o.warmup = 3;
  o.steps = 10;
  o.gemm_reps = 10;
  o.torch = -1;
  o.do_sgemm = o.do_resnet = o.do_gpt = 1;
  o.resnet_batch = 64;
  o.gpt_batch = 8;
  o.gpt_seq = 256;
  o.amp_dtype = TS_BF16;
  static char script[4096];
  const char *src = __FILE__, *slash = strrchr(src, '/');
  snprintf(script, sizeof script, "%.*storch_step.py", slash ? (int)(slash - src + 1) : 0, src);
  o.torch_script = getenv("TS_TORCH_STEP") ? getenv("TS_TORCH_STEP") : script;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--threads")) o.threads = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--warmup")) o.warmup = parse_int(a, v, 0), i++;
    else if (!strcmp(a, "--steps")) o.steps = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--gemm-reps")) o.gemm_reps = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--resnet-batch")) o.resnet_batch = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--gpt-batch")) o.gpt_batch = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--gpt-seq")) o.gpt_seq = parse_int(a, v, 1), i++;
    else if (!strcmp(a, "--profile")) o.profile = 1;
    else if (!strcmp(a, "--conv-native")) o.conv_native = 1;
    else if (!strcmp(a, "--no-fusion")) o.no_fusion = 1;
    else if (!strcmp(a, "--fusion-ab")) o.fusion_ab = 1;
    else if (!strcmp(a, "--eval-fusion-ab")) o.eval_fusion_ab = 1;
    else if (!strcmp(a, "--amp") && v && v[0] == 'O' && v[1] >= '1' && v[1] <= '3' && !v[2]) o.amp_level = v[1] - '0', i++;
    else if (!strcmp(a, "--amp-dtype") && v && (!strcmp(v, "bf16") || !strcmp(v, "f16")))
      o.amp_dtype = v[0] == 'b' ? TS_BF16 : TS_F16, i++;
    else if (!strcmp(a, "--torch")) o.torch = 1;
    else if (!strcmp(a, "--no-torch")) o.torch = 0;
    else if (!strcmp(a, "--torch-script") && v) o.torch_script = v, i++;
    else if (!strcmp(a, "--only") && v) {
      o.do_sgemm = strstr(v, "sgemm") != NULL;
      o.do_resnet = strstr(v, "resnet") != NULL;
      o.do_gpt = strstr(v, "gpt") != NULL;
      i++;
    } else {
      usage();
      return strcmp(a, "--help") && strcmp(a, "-h") ? 2 : 0;
    }
  }
  ts_threads_set(o.threads);

  if (o.eval_fusion_ab) { /* only this comparison (the GPT's evaluation forward) */
    if (!o.amp_level) o.amp_level = 2;
    bench_eval_fusion_ab(&o, o.gpt_batch, o.gpt_seq);
    return 0;
  }
  if (o.do_sgemm) {
    bench_gemm("sgemm_1024", 1024, 1024, 1024, o.gemm_reps);
    bench_gemm("sgemm_4096x768x768", 4096, 768, 768, o.gemm_reps);
  }

  if (o.fusion_ab) { /* only this comparison (needs --amp) */
    char nm[64];
    snprintf(nm, sizeof nm, "resnet18_cifar_b%d_step", o.resnet_batch);
    if (!o.amp_level) o.amp_level = 2;
    if (o.do_resnet) bench_fusion_ab(&o, "resnet18", nm, o.resnet_batch, 0);
    if (o.do_gpt) bench_fusion_ab(&o, "gpt", "gpt_6l_384d_step", o.gpt_batch, o.gpt_seq);
    return 0;
  }
  double amp_ms[2] = {-1, -1};
  if (o.amp_level) {
    char nm[64];
    snprintf(nm, sizeof nm, "resnet18_cifar_b%d_step", o.resnet_batch);
    if (o.do_resnet) amp_ms[0] = bench_amp(&o, "resnet18", nm, o.resnet_batch, 0);
    if (o.do_gpt) amp_ms[1] = bench_amp(&o, "gpt", "gpt_6l_384d_step", o.gpt_batch, o.gpt_seq);
  }

  result res[2];
  int nres = 0;
  if (o.do_resnet) bench_resnet(&o, &res[nres]), res[nres++].amp_ms = amp_ms[0];
  if (o.do_gpt) bench_gpt(&o, &res[nres]), res[nres++].amp_ms = amp_ms[1];
  if (!nres) return 0;

  int use_torch = o.torch;
  if (use_torch < 0) use_torch = torch_available();
  else if (use_torch && !torch_available()) {
    fprintf(stderr, "bench_step: --torch given but '%s -c \"import torch\"' fails\n", TORCH_PY);
    return 1;
  }
  for (int i = 0; i < nres; i++) res[i].torch_ms = res[i].torch_ms_env = res[i].torch_ms_unset = res[i].torch_amp_ms = -1;
  if (use_torch) {
    double ms[2], msa[2], msa_env[2] = {-1, -1};
    /* OPENBLAS_CORETYPE as set in the environment (if it is), and unset; the faster counts. */
    if (getenv("OPENBLAS_CORETYPE")) {
      run_torch(&o, 0, res, nres, ms, msa_env);
      for (int i = 0; i < nres; i++) res[i].torch_ms_env = ms[i];
    }
    run_torch(&o, 1, res, nres, ms, msa);
    for (int i = 0; i < nres; i++) {
      res[i].torch_amp_ms = msa_env[i] > 0 && (msa[i] <= 0 || msa_env[i] < msa[i]) ? msa_env[i] : msa[i];
      res[i].torch_ms_unset = ms[i];
      double a = res[i].torch_ms_env, b = res[i].torch_ms_unset;
      res[i].torch_ms = a > 0 && (b <= 0 || a < b) ? a : b;
    }
  }
  for (int i = 0; i < nres; i++) {
    result *r = &res[i];
    printf("{\"name\":\"%s\",\"threads\":%d,\"batch\":%d,", r->name, o.threads, r->batch);
    if (r->seq) printf("\"seq\":%d,", r->seq);
    printf("\"params\":%lld,\"warmup\":%d,\"steps\":%d,\"tessera_ms\":%.3f,",
           (long long)r->params, o.warmup, o.steps, r->tessera_ms);
    if (isfinite(r->loss))
      printf("\"tessera_loss\":%.6g", (double)r->loss);
    else
      printf("\"tessera_loss\":null");
    if (r->torch_ms > 0) {
      printf(",\"torch_ms\":%.3f,\"ratio\":%.4f", r->torch_ms, r->torch_ms / r->tessera_ms);
      if (r->torch_ms_env > 0) printf(",\"torch_ms_coretype_env\":%.3f", r->torch_ms_env);
      if (r->torch_ms_unset > 0) printf(",\"torch_ms_coretype_unset\":%.3f", r->torch_ms_unset);
    }
    if (r->amp_ms > 0) { /* --amp: our mixed-precision step against torch's best configuration */
      printf(",\"tessera_amp_ms\":%.3f", r->amp_ms);
      if (r->torch_amp_ms > 0) printf(",\"torch_autocast_bf16_ms\":%.3f", r->torch_amp_ms);
      double best = r->torch_ms;
      int amp_best = r->torch_amp_ms > 0 && (best <= 0 || r->torch_amp_ms < best);
      if (amp_best) best = r->torch_amp_ms;
      if (best > 0)
        printf(",\"torch_best\":\"%s\",\"torch_best_ms\":%.3f,\"amp_ratio\":%.4f", amp_best ? "autocast_bf16" : "f32",
               best, best / r->amp_ms);
    }
    printf("}\n");
  }
  return 0;
}
