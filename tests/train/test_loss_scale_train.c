/* Loss scaling in the trainer (train.loss_scale), at amp_level O0 (f32), under mpirun -n 1 and 2:
 *
 *  - equivalence: a fixed scale of 1024 (a power of two scales every f32 gradient exactly) trains
 *    an MLP bitwise identically to no scaling with clipping off (losses, grad norms, final
 *    parameters) — stand_alone, data_parallel, semi_auto_parallel (the sliced clipping path),
 *    optimizer_shard 2 and, on an even number of ranks, two pipeline stages (each piece's seed);
 *    with clipping on within 1e-6 relative (measured: 0);
 *  - overflow: an inf put into the input batch of ONE rank at step 3 (a plan hook, before the
 *    step's first forward): step 3 reports overflow 1, is skipped (parameters and optimizer state
 *    bitwise those after step 2, the optimizer's step count not advanced), the dynamic scale is
 *    halved for step 4 and grows back after loss_scale_window (3) clean steps; every rank reports
 *    the same and holds the same parameters; the metrics file says overflow 1, the scale, and null
 *    for the non-finite loss and norm. Under data_parallel, optimizer_shard 2 and the pipeline;
 *  - fixed: the step skipped, the scale unchanged; none: not skipped (the run diverges: the
 *    injection is real); dynamic at its minimum: the run stops naming the minimum;
 *  - resume: a checkpoint after step 4 (scale 32768, growth tracker 1) resumed gives steps 5-7
 *    the scales and final parameters of the uninterrupted run, bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "distribution/dist_impl.h"
#include "tessera/comm.h"
#include "tessera/train.h"
#include "test_util.h"
#include "train/train_impl.h"

#define STEPS 7
#define K 3 /* the step whose input gets the inf */

static int g_rank, g_size, g_who; /* g_who: the rank that injected */
static ts_comm *g_world;
static char g_dir[256];

typedef struct {
  double loss[STEPS + 1], norm[STEPS + 1], scale[STEPS + 1];
  int overflow[STEPS + 1], skipped[STEPS + 1];
  float *p[STEPS + 1]; /* the rank's parameters after each step */
  float *o[STEPS + 1]; /* its optimizer's slots after each step */
  int64_t ostep[STEPS + 1];
  size_t np, no;
} rec;

static void rec_free(rec *r) {
  for (int s = 0; s <= STEPS; s++) {
    free(r->p[s]);
    free(r->o[s]);
  }
}

static int rec_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  rec *r = u;
  int k = (int)s->step;
  if (k < 1 || k > STEPS) return TS_OK;
  r->loss[k] = s->loss;
  r->norm[k] = s->grad_norm;
  r->scale[k] = s->loss_scale;
  r->overflow[k] = s->overflow;
  r->skipped[k] = s->skipped;
  ts_params *p = ts_trainer_params(t);
  r->np = ts_params_numel(p);
  r->p[k] = malloc(sizeof(float) * (r->np + 1));
  if (ts_params_data(p)) memcpy(r->p[k], ts_params_data(p), sizeof(float) * r->np);
  size_t ext = ts_optim_extent(t->opt);
  int ns = ts_optim_num_slots(t->opt);
  r->no = ext * (size_t)ns;
  r->o[k] = malloc(sizeof(float) * (r->no + 1));
  for (int j = 0; j < ns; j++) memcpy(r->o[k] + ext * (size_t)j, ts_optim_slot_data(t->opt, j), sizeof(float) * ext);
  r->ostep[k] = ts_optim_get_step(t->opt);
  return TS_OK;
}

/* ---- the injection: an inf in the first sample of the step's first micro-batch ---- */
typedef struct {
  ts_plan *plan;
  ts_val x;
  int64_t from, to; /* the plan runs (step * micro-steps + micro-step) of step K */
  int *done;
} inj;

static void inject_hook(const ts_hook_info *e, void *u) {
  inj *j = u;
  if (e->event != TS_HOOK_RUN_BEGIN || *j->done || (int64_t)e->step < j->from || (int64_t)e->step >= j->to) return;
  float *x = ts_plan_data(j->plan, j->x);
  if (!x) return;
  x[0] = INFINITY;
  *j->done = 1;
}

static char text_cfg[2048];

static const char *yaml(void) {
  snprintf(text_cfg, sizeof text_cfg,
           "model: {name: mlp, hidden: [64]}\n"
           "data: {name: fashion_mnist, path: '%s', train_limit: 1536, test_limit: 128, num_workers: 1,\n"
           "       transforms: [{name: to_float, scale: 0.00392156862745098}, hwc_to_chw]}\n"
           "train: {steps: %d, batch_size: 64, seed: 3, eval_every: -1, log_every: 1}\n"
           "optimizer: {name: momentum, lr: 0.05, momentum: 0.9}\n"
           "log: {progress: off}\n",
           ts_test_fashion_mnist_dir(), STEPS);
  return text_cfg;
}

/* Trains with sets; inject: an inf into step K's input on one rank (the last rank that reads
 * inputs). *rc_fit gets fit's status. The final parameters (whole model) into a malloc'd copy. */
static float *train(const char *const *sets, int nsets, int inject, rec *r, int *rc_fit, size_t *n) {
  memset(r, 0, sizeof *r);
  *rc_fit = -1;
  ts_config cfg;
  int rc = ts_config_load_string(yaml(), "ls-train.yaml", sets, nsets, &cfg);
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  ts_trainer *t = NULL;
  if (!rc) CHECK_OK(rc = ts_trainer_create(&cfg, &t));
  ts_config_free(&cfg);
  if (rc) return NULL;
  ts_callback cb = {"rec", rec_cb, NULL, NULL, NULL, r};
  ts_trainer_add_callback(t, &cb);
  int done = 0, ninst = 1;
  ts_plan **plans = NULL, *one = ts_trainer_plan_handle(t);
  if (ts__dist_stages(t->dist) > 1) ninst = ts__dist_train_plans(t->dist, &plans);
  else plans = &one;
  inj js[16];
  int who = t->run->x != TS_NONE ? g_rank : -1; /* the last rank reading inputs injects */
  if (g_world) ts_comm_allreduce(g_world, &who, &who, 1, TS_I32, TS_REDUCE_MAX);
  g_who = who;
  for (int k = 0; inject && who == g_rank && k < ninst && k < 16; k++) {
    js[k] = (inj){plans[k], t->run->x, (int64_t)(K - 1) * t->accum, (int64_t)K * t->accum, &done};
    CHECK_OK(ts_plan_add_hook(plans[k], inject_hook, &js[k]));
  }
  *rc_fit = ts_trainer_fit(t);
  if (inject && who == g_rank) CHECK_MSG(done, "the injection hook never fired");
  float *out = NULL;
  if (*rc_fit == TS_OK) { /* the whole model, collected (collective) */
    char path[512];
    snprintf(path, sizeof path, "%s/final-%d.safetensors", g_dir, g_rank);
    ts_params *full = NULL;
    int owned = 0;
    CHECK_OK(ts_dist_whole_store(t->dist, &full, &owned));
    CHECK_OK(ts_dist_move(t->dist, full, NULL, NULL, 1));
    *n = ts_params_numel(full);
    out = malloc(sizeof(float) * (*n + 1));
    memcpy(out, ts_params_data(full), sizeof(float) * *n);
    if (owned) ts_params_free(full);
  }
  ts_trainer_free(t);
  return out;
}

static int bits_equal(const float *a, const float *b, size_t n) { return a && b && !memcmp(a, b, n * sizeof(float)); }

/* Every rank holds the same v[0..n) (bitwise). */
static int same_on_ranks(const float *v, size_t n) {
  if (!g_world || g_size < 2) return 1;
  float *mn = malloc(sizeof(float) * (n + 1)), *mx = malloc(sizeof(float) * (n + 1));
  ts_comm_allreduce(g_world, v, mn, n, TS_F32, TS_REDUCE_MIN);
  ts_comm_allreduce(g_world, v, mx, n, TS_F32, TS_REDUCE_MAX);
  int same = bits_equal(mn, v, n) && bits_equal(mx, v, n);
  free(mn);
  free(mx);
  return same;
}

/* ---- fixed 1024 against none ---- */
static void equivalence(const char *what, const char *const *layout, int nl, const char *clip, double tol) {
  const char *sa[12], *sb[12];
  int na = 0, nb = 0;
  for (int i = 0; i < nl; i++) sa[na++] = sb[nb++] = layout[i];
  if (clip) sa[na++] = sb[nb++] = clip;
  sa[na++] = "train.loss_scale=none";
  sb[nb++] = "train.loss_scale=fixed"; /* 1024: the default value */
  rec ra, rb;
  int fa, fb;
  size_t n1 = 0, n2 = 0;
  float *pa = train(sa, na, 0, &ra, &fa, &n1), *pb = train(sb, nb, 0, &rb, &fb, &n2);
  CHECK_MSG(fa == TS_OK && fb == TS_OK && pa && pb && n1 == n2, "%s: runs failed", what);
  if (pa && pb && n1 == n2) {
    double worst = 0;
    for (int k = 1; k <= STEPS; k++) {
      worst = fmax(worst, fabs(ra.loss[k] - rb.loss[k]) / fabs(ra.loss[k]));
      worst = fmax(worst, fabs(ra.norm[k] - rb.norm[k]) / fabs(ra.norm[k]));
      CHECK(ra.scale[k] == 1 && rb.scale[k] == 1024 && !rb.overflow[k] && !rb.skipped[k]);
    }
    for (size_t i = 0; i < n1; i++) worst = fmax(worst, fabs((double)pa[i] - pb[i]) / (fabs((double)pa[i]) + 1e-30));
    if (tol == 0) {
      CHECK_MSG(bits_equal(pa, pb, n1) && !memcmp(ra.loss, rb.loss, sizeof ra.loss) && !memcmp(ra.norm, rb.norm, sizeof ra.norm),
                "%s: fixed 1024 is not bitwise the unscaled run (max rel diff %.3g)", what, worst);
    } else {
      CHECK_MSG(worst <= tol, "%s: max rel diff %.3g > %.3g", what, worst, tol);
    }
    if (g_rank == 0)
      printf("%-44s fixed 1024 vs none, %d steps: %s (max rel diff %.3g: losses, norms, parameters)\n", what, STEPS,
             tol == 0 ? "bitwise" : "within tolerance", worst);
  }
  free(pa);
  free(pb);
  rec_free(&ra);
  rec_free(&rb);
}

/* ---- an overflow at step K ---- */
static void check_metrics(const char *what) {
  char path[512], line[8192];
  snprintf(path, sizeof path, "%s/m.jsonl", g_dir);
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "%s: no metrics file", what);
  if (!f) return;
  int seen = 0;
  while (fgets(line, sizeof line, f)) {
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j != NULL, "%s: metrics line is not JSON: %.120s", what, line);
    if (!j) continue;
    const cJSON *type = cJSON_GetObjectItem(j, "type"), *st = cJSON_GetObjectItem(j, "step");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "step") && cJSON_IsNumber(st)) {
      int s = (int)st->valuedouble;
      const cJSON *ov = cJSON_GetObjectItem(j, "overflow"), *sc = cJSON_GetObjectItem(j, "loss_scale");
      const cJSON *ls = cJSON_GetObjectItem(j, "loss"), *gn = cJSON_GetObjectItem(j, "grad_norm");
      CHECK_MSG(cJSON_IsNumber(ov) && ov->valueint == (s == K), "%s: step %d overflow field", what, s);
      CHECK_MSG(cJSON_IsNumber(sc) && sc->valuedouble == (s == K || s < K || s == STEPS ? 65536 : 32768),
                "%s: step %d loss_scale %g", what, s, cJSON_IsNumber(sc) ? sc->valuedouble : -1);
      if (s == K) CHECK_MSG(cJSON_IsNull(ls) && cJSON_IsNull(gn), "%s: step %d: loss and norm should be null", what, s);
      else CHECK(cJSON_IsNumber(ls) && cJSON_IsNumber(gn));
      seen++;
    }
    cJSON_Delete(j);
  }
  fclose(f);
  CHECK_MSG(seen == STEPS, "%s: %d step records", what, seen);
}

static void overflow_run(const char *what, const char *const *layout, int nl) {
  char metrics[600];
  snprintf(metrics, sizeof metrics, "log.metrics=%s/m.jsonl", g_dir);
  const char *s[12];
  int ns = 0;
  for (int i = 0; i < nl; i++) s[ns++] = layout[i];
  s[ns++] = "train.loss_scale=dynamic";
  s[ns++] = "train.loss_scale_window=3";
  s[ns++] = metrics;
  rec r;
  int rc;
  size_t n = 0;
  float *p = train(s, ns, 1, &r, &rc, &n);
  CHECK_MSG(rc == TS_OK, "%s: %s", what, ts_last_error());
  /* scales: 2^16 until the overflow, halved for 3 clean steps, then grown back */
  const double want[STEPS + 1] = {0, 65536, 65536, 65536, 32768, 32768, 32768, 65536};
  for (int k = 1; k <= STEPS && !rc; k++) {
    CHECK_MSG(r.scale[k] == want[k] && r.overflow[k] == (k == K) && r.skipped[k] == (k == K),
              "%s, rank %d, step %d: scale %g overflow %d skipped %d", what, g_rank, k, r.scale[k], r.overflow[k],
              r.skipped[k]);
    CHECK_MSG((k == K) == !isfinite(r.norm[k]), "%s: step %d norm %g", what, k, r.norm[k]);
  }
  if (!rc) {
    /* skipped: the rank's parameters and optimizer state as after step K-1, bitwise; its step
     * count not advanced; and they move again at step K+1 */
    CHECK_MSG(bits_equal(r.p[K], r.p[K - 1], r.np), "%s, rank %d: parameters changed across the skipped step", what,
              g_rank);
    CHECK_MSG(bits_equal(r.o[K], r.o[K - 1], r.no), "%s, rank %d: optimizer state changed across the skipped step",
              what, g_rank);
    CHECK_MSG(r.ostep[K] == r.ostep[K - 1] && r.ostep[K - 1] == K - 1 && r.ostep[STEPS] == STEPS - 1,
              "%s: optimizer steps %lld %lld %lld", what, (long long)r.ostep[K - 1], (long long)r.ostep[K],
              (long long)r.ostep[STEPS]);
    CHECK_MSG(!bits_equal(r.p[K + 1], r.p[K], r.np), "%s: step %d did not update", what, K + 1);
    CHECK_MSG(!isfinite(r.loss[K]) && isfinite(r.loss[K + 1]), "%s: losses %g %g", what, r.loss[K], r.loss[K + 1]);
    /* the same on every rank: the decisions (checked above against the same constants) and the
     * whole model */
    CHECK_MSG(p && same_on_ranks(p, n), "%s: the ranks' whole models differ", what);
    if (g_rank == 0) check_metrics(what);
    if (g_rank == 0)
      printf("%-44s inf at step %d on rank %d of %d: skipped (parameters, optimizer state bitwise kept), scale "
             "65536 -> 32768 -> 65536 after 3 clean steps, overflow 1 in the metrics\n",
             what, K, g_who, g_size);
  }
  free(p);
  rec_free(&r);
}

/* fixed: skipped, scale unchanged; none: applied (diverges); dynamic at its minimum: stops */
static void other_modes(void) {
  const char *dp = "parallel.mode=data_parallel";
  const char *fx[] = {dp, "train.loss_scale=fixed"};
  rec r;
  int rc;
  size_t n = 0;
  float *p = train(fx, 2, 1, &r, &rc, &n);
  CHECK_MSG(rc == TS_OK, "fixed: %s", ts_last_error());
  for (int k = 1; k <= STEPS && !rc; k++)
    CHECK_MSG(r.scale[k] == 1024 && r.skipped[k] == (k == K) && r.overflow[k] == (k == K), "fixed, step %d", k);
  if (!rc) CHECK(bits_equal(r.p[K], r.p[K - 1], r.np) && bits_equal(r.o[K], r.o[K - 1], r.no));
  free(p);
  rec_free(&r);
  const char *no[] = {dp, "train.loss_scale=none"};
  p = train(no, 2, 1, &r, &rc, &n);
  CHECK_MSG(rc == TS_EDIVERGED && strstr(ts_last_error(), "training diverged") && strstr(ts_last_error(), "at step 3"),
            "none: %d %s", rc, ts_last_error());
  free(p);
  rec_free(&r);
  const char *mn[] = {dp, "train.loss_scale=dynamic", "train.loss_scale_min=65536"};
  p = train(mn, 3, 1, &r, &rc, &n);
  CHECK_MSG(rc == TS_EDIVERGED && strstr(ts_last_error(), "minimum loss scale 65536 (train.loss_scale_min)"),
            "dynamic at its minimum: %d %s", rc, ts_last_error());
  free(p);
  rec_free(&r);
  if (g_rank == 0)
    printf("fixed: step %d skipped at 1024; none: applied, the run diverges; dynamic at its minimum: stops\n", K);
}

/* ---- resume ---- */
static void resume(void) {
  char dir[600], ck[700];
  snprintf(dir, sizeof dir, "checkpoint.dir=%s/ck", g_dir);
  const char *a[] = {"parallel.mode=data_parallel", "train.loss_scale=dynamic", "train.loss_scale_window=3", dir,
                     "checkpoint.save_steps=4", "checkpoint.keep_max=0"};
  rec ra, rb;
  int fa, fb;
  size_t na = 0, nb = 0;
  float *pa = train(a, 6, 1, &ra, &fa, &na);
  snprintf(ck, sizeof ck, "checkpoint.resume=%s/ck/ckpt-00000004.safetensors", g_dir);
  const char *b[] = {a[0], a[1], a[2], a[3], a[4], a[5], ck};
  float *pb = train(b, 7, 0, &rb, &fb, &nb); /* step 3 is behind it */
  CHECK_MSG(fa == TS_OK && fb == TS_OK, "resume: %s", ts_last_error());
  for (int k = 5; k <= STEPS && fa == TS_OK && fb == TS_OK; k++)
    CHECK_MSG(rb.scale[k] == ra.scale[k] && rb.loss[k] == ra.loss[k], "resumed step %d: scale %g vs %g", k,
              rb.scale[k], ra.scale[k]);
  CHECK_MSG(pa && pb && na == nb && bits_equal(pa, pb, na), "resumed parameters differ from the uninterrupted run's");
  if (g_rank == 0 && pa && pb)
    printf("resumed after step 4 (scale 32768, tracker 1): steps 5-7 at %g %g %g as uninterrupted, parameters "
           "bitwise\n", rb.scale[5], rb.scale[6], rb.scale[7]);
  free(pa);
  free(pb);
  rec_free(&ra);
  rec_free(&rb);
}

int main(int argc, char **argv) {
  if (!ts_test_have_fashion_mnist()) return ts_test_finish("test_loss_scale_train");
  CHECK_OK(ts_comm_init(&argc, &argv));
  CHECK_OK(ts_comm_world(&g_world));
  g_rank = ts_comm_rank(g_world);
  g_size = ts_comm_size(g_world);
  /* one directory for the job (rank 0's name) */
  int pid = (int)getpid();
  ts_comm_broadcast(g_world, &pid, 1, TS_I32, 0);
  snprintf(g_dir, sizeof g_dir, "/tmp/ts-lossscale-%d", pid);
  if (g_rank == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", g_dir, g_dir);
    CHECK(system(cmd) == 0);
  }
  ts_comm_barrier(g_world);
  const char *alone[] = {"parallel.mode=stand_alone"};
  const char *dp[] = {"parallel.mode=data_parallel"};
  const char *semi[] = {"parallel.mode=semi_auto_parallel", "parallel.strategies={}"};
  const char *zero2[] = {"parallel.mode=data_parallel", "parallel.optimizer_shard=2",
                         "parallel.optimizer_shard_threshold_kb=0"};
  /* gpipe: every micro-batch in flight, so the loss piece has 4 plan instances, each seeded */
  const char *pipe[] = {"parallel.mode=data_parallel", "parallel.pipeline_stages=2", "parallel.micro_batches=4",
                        "parallel.pipeline_schedule=gpipe"};
  const char *clip = "optimizer.clip_grad_norm=0.5"; /* the MLP's norm is ~1-2: every step clipped */
  if (g_rank == 0 && g_size == 1) {
    equivalence("stand_alone", alone, 1, NULL, 0);
    equivalence("stand_alone, clip 0.5", alone, 1, clip, 1e-6);
  }
  equivalence("data_parallel", dp, 1, NULL, 0);
  equivalence("data_parallel, clip 0.5", dp, 1, clip, 1e-6);
  equivalence("semi_auto_parallel (sliced clipping)", semi, 2, clip, 1e-6);
  equivalence("data_parallel, optimizer_shard 2", zero2, 3, clip, 1e-6);
  if (g_size % 2 == 0) equivalence("pipeline 2 stages, gpipe, 4 micro-batches", pipe, 4, clip, 1e-6);
  overflow_run("data_parallel", dp, 1);
  overflow_run("data_parallel, optimizer_shard 2", zero2, 3);
  if (g_size % 2 == 0) overflow_run("pipeline 2 stages, gpipe, 4 micro-batches", pipe, 4);
  other_modes();
  resume();
  ts_comm_barrier(g_world);
  if (g_rank == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) printf("(could not remove %s)\n", g_dir);
  }
  ts_comm_free(g_world);
  return ts_test_finish_job("test_loss_scale_train");
}
