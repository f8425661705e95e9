/* Optimizers, LR schedules and clipping against PyTorch 1.13 fixtures
 * (scripts/make_fixtures.py part "optim"; format in docs/fixtures.md).
 *
 * Tolerances: parameters and state after each of 5 f32 steps within atol 2e-6 + rtol 1e-5 of
 * torch (the kernels mirror torch's operation order; differences are FMA contraction and
 * reduction order, a few ulps). LR values within rtol 1e-6. Clipping within rtol 1e-6. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tessera/io.h"
#include "optim/optim_mixed.h"
#include "tessera/optim.h"
#include "tessera/tensor.h"
#include "test_util.h"

#ifndef TS_FIXTURE_DIR
#define TS_FIXTURE_DIR "tests/fixtures"
#endif

#define ATOL 2e-6
#define RTOL 1e-5
#define NP 19 /* parameters in the fixtures: w (3,5) at 0, b (4) at 15 */

static const char *k_cases[] = {"sgd",        "sgd_wd",          "momentum",    "momentum_damp", "nesterov",
                                "adam",       "adam_wd",         "adamw",       "lamb",          "lamb_always",
                                "sgd_groups", "momentum_groups", "adam_groups", "adamw_groups",  "lamb_groups"};

typedef struct {
  ts_optim_config cfg;
  ts_optim_segment seg[2];
  ts_optim_group groups[2]; /* the *_groups cases: each tensor in a group of its own (torch param_groups) */
  char names[2][16];
  int nsteps;
} fx_case;

static double jnum(const cJSON *o, const char *k, double dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static int load_case(ts_st_file *f, fx_case *c) {
  memset(c, 0, sizeof *c);
  const char *kind = ts_st_meta(f, "kind"), *cfg = ts_st_meta(f, "config");
  const char *segs = ts_st_meta(f, "segments"), *steps = ts_st_meta(f, "steps");
  if (!kind || !cfg || !segs || !steps) return -1;
  ts_optim_kind k;
  if (ts_optim_kind_parse(kind, &k)) return -1;
  c->cfg = ts_optim_config_default(k);
  cJSON *j = cJSON_Parse(cfg);
  if (!j) return -1;
  c->cfg.weight_decay = jnum(j, "weight_decay", 0);
  c->cfg.momentum = jnum(j, "momentum", 0);
  c->cfg.dampening = jnum(j, "dampening", 0);
  c->cfg.nesterov = (int)jnum(j, "nesterov", 0);
  c->cfg.beta1 = jnum(j, "beta1", 0.9);
  c->cfg.beta2 = jnum(j, "beta2", 0.999);
  c->cfg.eps = jnum(j, "eps", 1e-8);
  c->cfg.lamb_always_adapt = (int)jnum(j, "lamb_always_adapt", 0);
  cJSON_Delete(j);
  j = cJSON_Parse(segs);
  if (!j || cJSON_GetArraySize(j) != 2) {
    cJSON_Delete(j);
    return -1;
  }
  for (int s = 0; s < 2; s++) {
    const cJSON *e = cJSON_GetArrayItem(j, s);
    snprintf(c->names[s], sizeof c->names[s], "%s",
             cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring);
    c->seg[s].name = c->names[s];
    c->seg[s].offset = (size_t)jnum(e, "offset", 0);
    c->seg[s].numel = (size_t)jnum(e, "numel", 0);
    c->seg[s].flags = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "no_decay")) ? TS_SEG_NO_DECAY : 0;
    c->seg[s].flags |= TS_SEG_GROUP((int)jnum(e, "group", 0));
  }
  cJSON_Delete(j);
  const char *groups = ts_st_meta(f, "groups");
  if (groups) {
    if (!(j = cJSON_Parse(groups)) || cJSON_GetArraySize(j) != 2) {
      cJSON_Delete(j);
      return -1;
    }
    for (int k = 0; k < 2; k++) {
      c->groups[k].lr_scale = jnum(cJSON_GetArrayItem(j, k), "lr_scale", -1);
      c->groups[k].weight_decay = jnum(cJSON_GetArrayItem(j, k), "weight_decay", -1);
    }
    c->cfg.ngroups = 2;
    c->cfg.groups = c->groups;
    cJSON_Delete(j);
  }
  c->nsteps = atoi(steps);
  return 0;
}

static void get(ts_st_file *f, const char *name, float *dst, int n) {
  ts_shape s = ts_shape1(n);
  CHECK_OK(ts_st_read(f, name, TS_F32, &s, dst));
}

/* Copies the fixture's flat vector (fixture layout) into layout `segs`. */
static void to_layout(const float *src, const fx_case *c, const ts_optim_segment *segs, float *dst) {
  for (int s = 0; s < 2; s++)
    memcpy(dst + segs[s].offset, src + c->seg[s].offset, c->seg[s].numel * sizeof(float));
}

/* Runs one fixture. layout 0: the fixture's offsets; layout 1: segments swapped, with gaps
 * (sentinel values that must not change), to check that only offsets matter. Steps 1..split
 * run on one optimizer; if split < nsteps the state is saved to a safetensors file through the
 * named views, and a fresh optimizer resumes from it. */
static void run_case(const char *name, int layout, int split) {
  char path[512], what[128];
  snprintf(path, sizeof path, "%s/optim_%s.safetensors", TS_FIXTURE_DIR, name);
  ts_st_file *f;
  CHECK_OK(ts_st_open(path, &f));
  if (!f) return;
  fx_case c;
  CHECK_MSG(load_case(f, &c) == 0, "%s: bad metadata", path);
  ts_optim_segment segs[2] = {c.seg[0], c.seg[1]};
  size_t ext = NP;
  if (layout == 1) {
    segs[1].offset = 1; /* b at [1,5), w at [7,22), sentinels at 0, 5, 6 */
    segs[0].offset = 7;
    ext = 22;
  }
  float fx[NP], p[32], g[32], want[32], lrs[8];
  for (size_t i = 0; i < ext; i++) p[i] = g[i] = want[i] = 1234.5f;
  get(f, "params_0", fx, NP);
  to_layout(fx, &c, segs, p);
  get(f, "lr", lrs, c.nsteps);
  ts_optim *o;
  CHECK_OK(ts_optim_create(&o, &c.cfg, segs, 2));
  if (!o) {
    ts_st_close(f);
    return;
  }
  CHECK(ts_optim_extent(o) == ext);
  for (int k = 1; k <= c.nsteps; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "grad_%d", k);
    get(f, nm, fx, NP);
    to_layout(fx, &c, segs, g);
    CHECK_OK(ts_optim_step(o, p, g, lrs[k - 1]));
    snprintf(nm, sizeof nm, "params_%d", k);
    get(f, nm, fx, NP);
    to_layout(fx, &c, segs, want);
    snprintf(what, sizeof what, "%s layout %d split %d: params after step %d", name, layout,
             split, k);
    CHECK_CLOSE(p, want, ext, ATOL, RTOL, what);
    if (k == split && k < c.nsteps) { /* checkpoint the state, resume in a fresh optimizer */
      char ck[600];
      snprintf(ck, sizeof ck, "/tmp/ts_optim_ckpt_%d.safetensors", (int)getpid());
      ts_st_writer *w;
      CHECK_OK(ts_st_writer_create(&w));
      for (int i = 0; i < ts_optim_state_count(o); i++) {
        ts_tensor v;
        CHECK_OK(ts_optim_state_view(o, i, &v));
        CHECK_OK(ts_st_writer_add_tensor(w, ts_optim_state_name(o, i), &v));
      }
      CHECK_OK(ts_st_write(w, ck));
      ts_st_writer_free(w);
      ts_optim_free(o);
      CHECK_OK(ts_optim_create(&o, &c.cfg, segs, 2));
      ts_st_file *cf;
      CHECK_OK(ts_st_open(ck, &cf));
      for (int i = 0; o && cf && i < ts_optim_state_count(o); i++) {
        ts_tensor v;
        CHECK_OK(ts_optim_state_view(o, i, &v));
        CHECK_OK(ts_st_read(cf, ts_optim_state_name(o, i), v.dtype, &v.shape, v.data));
      }
      CHECK(o && ts_optim_get_step(o) == k);
      ts_st_close(cf);
      unlink(ck);
      if (!o) break;
    }
  }
  /* final state vs torch's, through the named views */
  for (int sl = 0; o && sl < ts_optim_num_slots(o); sl++) {
    char nm[64];
    snprintf(nm, sizeof nm, "state.%s", ts_optim_slot_name(o, sl));
    get(f, nm, fx, NP);
    for (int s = 0; s < 2; s++) {
      char vn[64];
      ts_tensor v;
      snprintf(vn, sizeof vn, "%s.%s", ts_optim_slot_name(o, sl), segs[s].name);
      CHECK_OK(ts_optim_state_find(o, vn, &v));
      snprintf(what, sizeof what, "%s layout %d: %s", name, layout, vn);
      if (v.data) CHECK_CLOSE((float *)v.data, fx + c.seg[s].offset, c.seg[s].numel, ATOL, RTOL, what);
    }
  }
  if (o) CHECK(ts_optim_get_step(o) == c.nsteps);
  ts_optim_free(o);
  ts_st_close(f);
}

static int parse_sched(const char *json, ts_lr_schedule *s) {
  memset(s, 0, sizeof *s);
  cJSON *j = cJSON_Parse(json);
  if (!j) return -1;
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
  int rc = (cJSON_IsString(k) && ts_lr_kind_parse(k->valuestring, &s->kind) == TS_OK) ? 0 : -1;
  s->base_lr = jnum(j, "base_lr", 0);
  s->warmup_steps = (int64_t)jnum(j, "warmup_steps", 0);
  s->step_size = (int64_t)jnum(j, "step_size", 0);
  s->gamma = jnum(j, "gamma", 1);
  s->total_steps = (int64_t)jnum(j, "total_steps", 0);
  s->min_lr = jnum(j, "min_lr", 0);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "milestones");
  for (int i = 0; cJSON_IsArray(m) && i < cJSON_GetArraySize(m) && i < TS_LR_MAX_MILESTONES; i++)
    s->milestones[s->nmilestones++] = (int64_t)cJSON_GetArrayItem(m, i)->valuedouble;
  cJSON_Delete(j);
  return rc;
}

static void test_lr(void) {
  ts_st_file *f;
  CHECK_OK(ts_st_open(TS_FIXTURE_DIR "/lr_schedules.safetensors", &f));
  if (!f) return;
  int steps = atoi(ts_st_meta(f, "steps") ? ts_st_meta(f, "steps") : "0");
  CHECK(steps > 0 && steps <= 64);
  int checked = 0;
  for (int i = 0; i < ts_st_count(f); i++) {
    const char *nm = ts_st_name(f, i);
    ts_lr_schedule s;
    CHECK_MSG(ts_st_meta(f, nm) && parse_sched(ts_st_meta(f, nm), &s) == 0, "schedule %s", nm);
    CHECK_OK(ts_lr_check(&s));
    float want[64], got[64];
    get(f, nm, want, steps);
    for (int k = 0; k < steps; k++) got[k] = ts_lr_at(&s, k);
    CHECK_CLOSE(got, want, (size_t)steps, 1e-12, 1e-6, nm);
    checked++;
  }
  CHECK(checked == 6);
  ts_st_close(f);
  /* validation */
  ts_lr_schedule s;
  memset(&s, 0, sizeof s);
  s.kind = TS_LR_STEP;
  s.base_lr = 0.1;
  CHECK(ts_lr_check(&s) == TS_EINVAL); /* step_size 0 */
  s.kind = TS_LR_MULTISTEP;
  s.gamma = 0.1;
  s.nmilestones = 2;
  s.milestones[0] = 5;
  s.milestones[1] = 5;
  CHECK(ts_lr_check(&s) == TS_EINVAL);
  CHECK(strstr(ts_last_error(), "milestones") != NULL);
  s.kind = TS_LR_COSINE;
  s.warmup_steps = 10;
  s.total_steps = 5;
  CHECK(ts_lr_check(&s) == TS_EINVAL);
  s.total_steps = 10; /* total == warmup: warm-up, base_lr at step 10, then min_lr */
  CHECK_OK(ts_lr_check(&s));
  CHECK(fabsf(ts_lr_at(&s, 9) - 0.09f) < 1e-8f && ts_lr_at(&s, 10) == 0.1f);
  CHECK(ts_lr_at(&s, 11) == 0.0f && ts_lr_at(&s, 1000) == 0.0f && ts_lr_at(&s, 0) == 0.0f);
  /* TABLE: rate i at step i, the last one after the table; no warm-up; rates finite and >= 0 */
  const float tab[3] = {0.3f, 0.2f, 0.1f};
  memset(&s, 0, sizeof s);
  s.kind = TS_LR_TABLE;
  s.base_lr = 7;
  CHECK(ts_lr_check(&s) == TS_EINVAL && strstr(ts_last_error(), "no rates"));
  s.table = tab;
  s.ntable = 3;
  CHECK_OK(ts_lr_check(&s));
  CHECK(ts_lr_at(&s, 0) == 0.3f && ts_lr_at(&s, 2) == 0.1f && ts_lr_at(&s, 3) == 0.1f && ts_lr_at(&s, -1) == 0.3f);
  s.warmup_steps = 1;
  CHECK(ts_lr_check(&s) == TS_EINVAL && strstr(ts_last_error(), "warmup_steps"));
  s.warmup_steps = 0;
  const float bad[2] = {0.1f, NAN};
  s.table = bad;
  s.ntable = 2;
  CHECK(ts_lr_check(&s) == TS_EINVAL && strstr(ts_last_error(), "rate [1]"));
  ts_lr_kind lk;
  CHECK(ts_lr_kind_parse("Cosine", &lk) == TS_OK && lk == TS_LR_COSINE);
  CHECK(ts_lr_kind_parse("table", &lk) == TS_OK && lk == TS_LR_TABLE);
  CHECK(ts_lr_kind_parse("poly", &lk) == TS_ENOTFOUND);
}

static void test_clip(void) {
  ts_st_file *f;
  CHECK_OK(ts_st_open(TS_FIXTURE_DIR "/optim_clip.safetensors", &f));
  if (!f) return;
  const char *cases[2] = {"clip", "noclip"};
  for (int k = 0; k < 2; k++) {
    char nm[64];
    float g[NP], want[NP], tot_want, tot;
    snprintf(nm, sizeof nm, "%s.grad", cases[k]);
    get(f, nm, g, NP);
    snprintf(nm, sizeof nm, "%s.clipped", cases[k]);
    get(f, nm, want, NP);
    snprintf(nm, sizeof nm, "%s.total_norm", cases[k]);
    ts_shape sc = ts_shape_make(0, NULL);
    CHECK_OK(ts_st_read(f, nm, TS_F32, &sc, &tot_want));
    snprintf(nm, sizeof nm, "%s.max_norm", cases[k]);
    float max_norm = (float)atof(ts_st_meta(f, nm) ? ts_st_meta(f, nm) : "1");
    CHECK_OK(ts_clip_grad_norm(g, NP, max_norm, &tot));
    CHECK_CLOSE(&tot, &tot_want, 1, 0, 1e-6, cases[k]);
    CHECK_CLOSE(g, want, NP, 1e-9, 1e-6, cases[k]);
  }
  ts_st_close(f);
  float g[3] = {3, 4, 0}, tot;
  CHECK(ts_clip_grad_norm(g, 3, 0.0f, &tot) == TS_EINVAL);
  CHECK_OK(ts_clip_grad_norm(g, 3, 5.0f, &tot));
  CHECK(tot == 5.0f && g[0] < 3.0f && g[0] > 2.9999f); /* 5/(5+1e-6) < 1: scaled, as torch */
  float h[2] = {3, 4};
  CHECK_OK(ts_clip_grad_norm(h, 2, 10.0f, NULL));
  CHECK(h[0] == 3.0f && h[1] == 4.0f);
}

/* Results must not depend on the number of threads. */
static void test_determinism(void) {
  size_t n = 300000;
  float *x = malloc(n * sizeof *x), *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
  float *g = malloc(n * sizeof *g);
  ts_test_fill(x, n, 7, -1, 1);
  ts_test_fill(g, n, 8, -1, 1);
  ts_threads_set(1);
  double s1 = ts_sum_squares(x, n);
  ts_threads_set(2);
  double s2 = ts_sum_squares(x, n);
  CHECK(s1 == s2);
  for (int kind = TS_OPTIM_SGD; kind < TS_OPTIM_COUNT; kind++) {
    ts_optim_config cfg = ts_optim_config_default((ts_optim_kind)kind);
    ts_optim_segment seg[2] = {{"big", 0, n - 1000, 0}, {"small", n - 1000, 1000, TS_SEG_NO_DECAY}};
    float *pp[2] = {p1, p2};
    for (int t = 0; t < 2; t++) {
      ts_threads_set(t + 1);
      memcpy(pp[t], x, n * sizeof *x);
      ts_optim *o;
      CHECK_OK(ts_optim_create(&o, &cfg, seg, 2));
      for (int k = 0; o && k < 3; k++) CHECK_OK(ts_optim_step(o, pp[t], g, 0.01f));
      ts_optim_free(o);
    }
    CHECK_MSG(memcmp(p1, p2, n * sizeof *p1) == 0, "%s differs between 1 and 2 threads",
              ts_optim_kind_name((ts_optim_kind)kind));
  }
  free(x);
  free(p1);
  free(p2);
  free(g);
}

static void test_api(void) {
  ts_optim *o = NULL;
  ts_optim_config cfg = ts_optim_config_default(TS_OPTIM_MOMENTUM);
  ts_optim_segment seg[3] = {{"a", 0, 4, 0}, {"b", 4, 4, TS_SEG_FROZEN}, {"c", 8, 2, 0}};
  cfg.nesterov = 1;
  cfg.momentum = 0;
  CHECK(ts_optim_create(&o, &cfg, seg, 3) == TS_EINVAL && o == NULL);
  CHECK(strstr(ts_last_error(), "nesterov") != NULL);
  cfg.momentum = 0.9;
  ts_optim_segment dup[2] = {{"a", 0, 4, 0}, {"a", 4, 4, 0}};
  CHECK(ts_optim_create(&o, &cfg, dup, 2) == TS_EINVAL && strstr(ts_last_error(), "'a'"));
  ts_optim_segment ovl[2] = {{"a", 0, 4, 0}, {"b", 3, 4, 0}};
  CHECK(ts_optim_create(&o, &cfg, ovl, 2) == TS_EINVAL && strstr(ts_last_error(), "overlap"));
  ts_optim_config bad = ts_optim_config_default(TS_OPTIM_ADAM);
  bad.beta2 = 1.0;
  CHECK(ts_optim_create(&o, &bad, seg, 3) == TS_EINVAL && strstr(ts_last_error(), "beta2"));
  ts_optim_kind k;
  CHECK(ts_optim_kind_parse("AdamW", &k) == TS_OK && k == TS_OPTIM_ADAMW);
  CHECK(ts_optim_kind_parse("rmsprop", &k) == TS_ENOTFOUND);
  cfg.nesterov = 0;

  CHECK_OK(ts_optim_create(&o, &cfg, seg, 3));
  if (!o) return;
  float p[10], g[10];
  for (int i = 0; i < 10; i++) {
    p[i] = (float)i;
    g[i] = 1.0f;
  }
  CHECK_OK(ts_optim_step(o, p, g, 0.5f));
  CHECK(p[0] == -0.5f && p[4] == 4.0f && p[7] == 7.0f && p[9] == 8.5f); /* b frozen */
  CHECK(ts_optim_state_count(o) == 1 + 3);
  CHECK(strcmp(ts_optim_state_name(o, 0), "step") == 0);
  CHECK(strcmp(ts_optim_state_name(o, 3), "momentum_buffer.c") == 0);
  ts_tensor v;
  CHECK_OK(ts_optim_state_view(o, 0, &v));
  CHECK(v.dtype == TS_I64 && v.shape.ndim == 0 && *(int64_t *)v.data == 1);
  CHECK(ts_optim_state_find(o, "exp_avg.a", &v) == TS_ENOTFOUND);
  ts_optim_reset(o);
  CHECK(ts_optim_get_step(o) == 0 && ts_optim_slot_data(o, 0)[0] == 0.0f);
  ts_optim_free(o);
  cfg = ts_optim_config_default(TS_OPTIM_SGD);
  CHECK_OK(ts_optim_create(&o, &cfg, seg, 3));
  CHECK(o && ts_optim_num_slots(o) == 0 && ts_optim_state_count(o) == 1);
  ts_optim_free(o);
}

/* The LAMB norm-reduction hook sees per-segment sums of squares; doubling them both leaves
 * the ratio unchanged, and a failing hook aborts before parameters change. */
static int hook_double(double *s, int n, void *u) {
  for (int i = 0; i < n; i++) s[i] *= 2;
  ++*(int *)u;
  return TS_OK;
}
static int hook_fail(double *s, int n, void *u) {
  (void)s, (void)n, (void)u;
  return ts_error_set(TS_ECOMM, "peer gone");
}

static void test_lamb_hook(void) {
  ts_optim_config cfg = ts_optim_config_default(TS_OPTIM_LAMB);
  ts_optim_segment seg[1] = {{"w", 0, 8, 0}};
  float p1[8], p2[8], g[8];
  ts_test_fill(p1, 8, 1, -1, 1);
  memcpy(p2, p1, sizeof p1);
  ts_test_fill(g, 8, 2, -1, 1);
  ts_optim *a, *b;
  CHECK_OK(ts_optim_create(&a, &cfg, seg, 1));
  CHECK_OK(ts_optim_create(&b, &cfg, seg, 1));
  int calls = 0;
  ts_optim_set_norm_reduce(b, hook_double, &calls);
  CHECK_OK(ts_optim_step(a, p1, g, 0.1f));
  CHECK_OK(ts_optim_step(b, p2, g, 0.1f));
  CHECK(calls == 1);
  CHECK_CLOSE(p2, p1, 8, 0, 1e-6, "lamb with reduction hook");
  ts_optim_set_norm_reduce(b, hook_fail, NULL);
  memcpy(p1, p2, sizeof p1);
  CHECK(ts_optim_step(b, p2, g, 0.1f) == TS_ECOMM);
  CHECK(strstr(ts_last_error(), "peer gone") != NULL);
  CHECK(memcmp(p1, p2, sizeof p1) == 0);
  ts_optim_free(a);
  ts_optim_free(b);
}

/* Parameter groups: one optimizer over segments a (group 1: lr x 0.3, wd 0.1), b (the default
 * group: the config's lr and wd 0.02), c (group 2: lr x 0, wd 0.5: frozen by its rate) and d (group
 * 1 and NO_DECAY: lr x 0.3, no decay) updates each bitwise as an optimizer of that segment alone
 * created with the group's weight decay and stepped at the group's rate (float(lr * lr_scale)),
 * for every kind, over 3 steps; a segment in a group the config lacks, and a group's negative
 * factor, are refused naming them. */
static void test_groups(void) {
  const ts_optim_group gr[2] = {{0.3, 0.1}, {0.0, 0.5}};
  const ts_optim_segment seg[4] = {{"a", 0, 700, TS_SEG_GROUP(1)},
                                   {"b", 700, 300, 0},
                                   {"c", 1000, 50, TS_SEG_GROUP(2)},
                                   {"d", 1050, 9, TS_SEG_GROUP(1) | TS_SEG_NO_DECAY}};
  const double wd_alone[4] = {0.1, 0.02, 0.5, 0.0};
  const double scale[4] = {0.3, 1.0, 0.0, 0.3};
  const size_t n = 1059;
  const float lrs[3] = {0.1f, 0.05f, 0.2f};
  float *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *p = malloc(n * sizeof *p);
  ts_test_fill(x, n, 21, -1, 1);
  ts_test_fill(g, n, 22, -1, 1);
  for (int kind = TS_OPTIM_SGD; kind < TS_OPTIM_COUNT; kind++) {
    ts_optim_config cfg = ts_optim_config_default((ts_optim_kind)kind);
    if (kind == TS_OPTIM_MOMENTUM) cfg.nesterov = 1;
    cfg.weight_decay = 0.02;
    cfg.ngroups = 2;
    cfg.groups = gr;
    ts_optim *o = NULL;
    CHECK_OK(ts_optim_create(&o, &cfg, seg, 4));
    memcpy(p, x, n * sizeof *p);
    for (int k = 0; o && k < 3; k++) CHECK_OK(ts_optim_step(o, p, g, lrs[k]));
    for (int s = 0; s < 4 && o; s++) {
      ts_optim_config c1 = cfg;
      c1.ngroups = 0, c1.groups = NULL, c1.weight_decay = wd_alone[s];
      ts_optim_segment one = {seg[s].name, 0, seg[s].numel, seg[s].flags & TS_SEG_NO_DECAY};
      ts_optim *a = NULL;
      CHECK_OK(ts_optim_create(&a, &c1, &one, 1));
      float *q = malloc(seg[s].numel * sizeof *q);
      memcpy(q, x + seg[s].offset, seg[s].numel * sizeof *q);
      for (int k = 0; a && k < 3; k++) CHECK_OK(ts_optim_step(a, q, g + seg[s].offset, (float)((double)lrs[k] * scale[s])));
      CHECK_MSG(memcmp(q, p + seg[s].offset, seg[s].numel * sizeof *q) == 0, "%s: segment %s differs from alone",
                ts_optim_kind_name((ts_optim_kind)kind), seg[s].name);
      for (int sl = 0; a && sl < ts_optim_num_slots(a); sl++)
        CHECK(memcmp(ts_optim_slot_data(a, sl), ts_optim_slot_data(o, sl) + seg[s].offset, seg[s].numel * sizeof(float)) == 0);
      if (s == 2) CHECK(memcmp(q, x + seg[s].offset, seg[s].numel * sizeof *q) == 0); /* lr x 0: unchanged */
      if (s == 0) CHECK(memcmp(q, x, seg[s].numel * sizeof *q) != 0);
      CHECK(ts_optim_segment_lr(&cfg, &seg[s], 0.1f) == (float)(0.1f * scale[s]));
      CHECK(ts_optim_segment_wd(&cfg, &seg[s]) == wd_alone[s]);
      free(q);
      ts_optim_free(a);
    }
    ts_optim_free(o);
  }
  ts_optim_config cfg = ts_optim_config_default(TS_OPTIM_SGD);
  cfg.ngroups = 1;
  cfg.groups = gr;
  ts_optim *o = NULL;
  CHECK(ts_optim_create(&o, &cfg, seg, 4) == TS_EINVAL && strstr(ts_last_error(), "'c' is in parameter group 2 of 1"));
  ts_optim_group bad = {-1.0, 0.0};
  cfg.groups = &bad;
  CHECK(ts_optim_create(&o, &cfg, seg, 1) == TS_EINVAL && strstr(ts_last_error(), "parameter group 1: lr_scale -1"));
  CHECK(o == NULL);
  free(x), free(g), free(p);
}

/* ts_optim_step_segments: segments whose parameters and gradients live in separate arrays (in
 * another order than their offsets) update bitwise as ts_optim_step on the flat buffers, for every
 * kind (frozen and no-decay segments included); the state stays at the offsets. */
static void test_step_segments(void) {
  ts_optim_segment seg[3] = {{"a", 0, 5000, 0}, {"b", 5000, 7, TS_SEG_NO_DECAY}, {"c", 5007, 300, TS_SEG_FROZEN}};
  const size_t n = 5307;
  float *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *flat = malloc(n * sizeof *flat);
  float *pa[3], *ga[3];
  ts_test_fill(x, n, 11, -1, 1);
  ts_test_fill(g, n, 12, -1, 1);
  for (int kind = TS_OPTIM_SGD; kind < TS_OPTIM_COUNT; kind++) {
    ts_optim_config cfg = ts_optim_config_default((ts_optim_kind)kind);
    ts_optim *a = NULL, *b = NULL;
    CHECK_OK(ts_optim_create(&a, &cfg, seg, 3));
    CHECK_OK(ts_optim_create(&b, &cfg, seg, 3));
    if (!a || !b) break;
    memcpy(flat, x, n * sizeof *x);
    for (int s = 2; s >= 0; s--) { /* allocated apart, in reverse order */
      pa[s] = malloc(seg[s].numel * sizeof(float));
      ga[s] = malloc(seg[s].numel * sizeof(float));
      memcpy(pa[s], x + seg[s].offset, seg[s].numel * sizeof(float));
      memcpy(ga[s], g + seg[s].offset, seg[s].numel * sizeof(float));
    }
    for (int k = 0; k < 3; k++) {
      CHECK_OK(ts_optim_step(a, flat, g, 0.01f));
      CHECK_OK(ts_optim_step_segments(b, pa, (const float *const *)ga, 0.01f));
    }
    for (int s = 0; s < 3; s++) {
      CHECK_MSG(memcmp(pa[s], flat + seg[s].offset, seg[s].numel * sizeof(float)) == 0, "%s: segment %s differs",
                ts_optim_kind_name((ts_optim_kind)kind), seg[s].name);
      for (int k = 0; k < ts_optim_num_slots(a); k++)
        CHECK(memcmp(ts_optim_slot_data(a, k), ts_optim_slot_data(b, k), n * sizeof(float)) == 0);
      const ts_optim_segment *q = ts_optim_segment_at(b, s);
      CHECK(q && q->offset == seg[s].offset && q->numel == seg[s].numel && strcmp(q->name, seg[s].name) == 0);
    }
    CHECK(ts_optim_num_segments(b) == 3 && ts_optim_segment_at(b, 3) == NULL);
    float *keep = pa[1];
    pa[1] = NULL;
    CHECK(ts_optim_step_segments(b, pa, (const float *const *)ga, 0.01f) == TS_EINVAL &&
          strstr(ts_last_error(), "'b'") != NULL);
    pa[1] = keep;
    for (int s = 0; s < 3; s++) {
      free(pa[s]);
      free(ga[s]);
    }
    ts_optim_free(a);
    ts_optim_free(b);
  }
  free(x);
  free(g);
  free(flat);
}

/* ts__optim_step_mixed (ZeRO's mixed precision): segments with bf16, f16 and f32 gradients, each
 * scaled by gscale as it is read, in segments longer than its 64 Ki-float scratch, update bitwise
 * as ts_optim_step_segments on the widened, scaled gradients, for every kind but LAMB (refused,
 * naming it); a dtype other than f32/bf16/f16 is refused naming the segment. */
static void test_step_mixed(void) {
  ts_optim_segment seg[3] = {{"a", 0, 150000, 0}, {"b", 150000, 77, TS_SEG_NO_DECAY}, {"c", 150077, 3000, 0}};
  const ts_dtype dts[3] = {TS_BF16, TS_F32, TS_F16};
  const size_t n = 153077;
  const float gscale = 0.37f;
  float *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *wide = malloc(n * sizeof *wide);
  uint16_t *g16 = malloc(n * sizeof *g16);
  float *pa[3], *pb[3];
  const void *gm[3];
  const float *gw[3];
  ts_test_fill(x, n, 21, -1, 1);
  ts_test_fill(g, n, 22, -1, 1);
  for (int s = 0; s < 3; s++) { /* each segment's gradients in its dtype; the reference's widened and scaled */
    size_t o = seg[s].offset, m = seg[s].numel;
    if (dts[s] == TS_F32) {
      gm[s] = g + o;
      memcpy(wide + o, g + o, m * sizeof(float));
    } else {
      CHECK_OK(ts_convert(g + o, TS_F32, g16 + o, dts[s], m));
      CHECK_OK(ts_convert(g16 + o, dts[s], wide + o, TS_F32, m));
      gm[s] = g16 + o;
    }
    for (size_t i = 0; i < m; i++) wide[o + i] *= gscale;
    gw[s] = wide + o;
  }
  for (int kind = TS_OPTIM_SGD; kind < TS_OPTIM_COUNT; kind++) {
    ts_optim_config cfg = ts_optim_config_default((ts_optim_kind)kind);
    ts_optim *a = NULL, *b = NULL;
    CHECK_OK(ts_optim_create(&a, &cfg, seg, 3));
    CHECK_OK(ts_optim_create(&b, &cfg, seg, 3));
    if (!a || !b) break;
    for (int s = 0; s < 3; s++) {
      pa[s] = malloc(seg[s].numel * sizeof(float));
      pb[s] = malloc(seg[s].numel * sizeof(float));
      memcpy(pa[s], x + seg[s].offset, seg[s].numel * sizeof(float));
      memcpy(pb[s], x + seg[s].offset, seg[s].numel * sizeof(float));
    }
    if (kind == TS_OPTIM_LAMB) {
      CHECK(ts__optim_step_mixed(b, pb, gm, dts, gscale, 0.01f) == TS_EINVAL && strstr(ts_last_error(), "LAMB"));
    } else {
      for (int k = 0; k < 3; k++) {
        CHECK_OK(ts_optim_step_segments(a, pa, gw, 0.01f));
        CHECK_OK(ts__optim_step_mixed(b, pb, gm, dts, gscale, 0.01f));
      }
      for (int s = 0; s < 3; s++)
        CHECK_MSG(memcmp(pa[s], pb[s], seg[s].numel * sizeof(float)) == 0, "%s: segment %s (%s gradients) differs",
                  ts_optim_kind_name((ts_optim_kind)kind), seg[s].name, ts_dtype_name(dts[s]));
      for (int k = 0; k < ts_optim_num_slots(a); k++)
        CHECK(memcmp(ts_optim_slot_data(a, k), ts_optim_slot_data(b, k), n * sizeof(float)) == 0);
      CHECK(ts_optim_get_step(a) == 3 && ts_optim_get_step(b) == 3);
      const ts_dtype bad[3] = {TS_BF16, TS_I32, TS_F16};
      CHECK(ts__optim_step_mixed(b, pb, gm, bad, 1.0f, 0.01f) == TS_EINVAL && strstr(ts_last_error(), "'b'"));
    }
    for (int s = 0; s < 3; s++) {
      free(pa[s]);
      free(pb[s]);
    }
    ts_optim_free(a);
    ts_optim_free(b);
  }
  free(x);
  free(g);
  free(wide);
  free(g16);
}

int main(void) {
  test_step_segments();
  test_groups();
  test_step_mixed();
  for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
    run_case(k_cases[i], 0, 99);
    run_case(k_cases[i], 1, 99);
    run_case(k_cases[i], 0, 3);
  }
  test_lr();
  test_clip();
  test_api();
  test_lamb_hook();
  test_determinism();
  return ts_test_finish("test_optim");
}
