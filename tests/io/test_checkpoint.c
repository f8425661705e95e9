/* Checkpoints: bitwise round trip of a parameter store and an AdamW optimizer after a few steps
 * (and identical training after resuming), strict / non-strict mismatch reports, another model
 * or config refused, corrupt and truncated files, rotation and latest, parameter export, snapshots
 * (checkpoint.async's host copy: its file = ts_ckpt_save's byte for byte, taken before the state
 * changes, the buffer reused). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "tessera/config.h"
#include "test_util.h"

static char g_dir[256];
static const char *tpath(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}
static int has(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* ---- log capture ---- */
static char g_log[16384];
static void log_hook(ts_log_level level, const char *msg, void *user) {
  (void)user;
  if (level < TS_LOG_WARN) return;
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
}

/* ---- a small model: variant 0 is the reference; variant 1 differs in shapes and names ---- */
static ts_params *make_params(int variant, uint64_t seed) {
  ts_params *p;
  ts_params_create(&p);
  ts_init kd = {TS_INIT_KAIMING_UNIFORM, 0, 0, 0}, un = {TS_INIT_UNIFORM, -1, 1, 0};
  ts_params_add(p, "fc1.weight", ts_shape2(8, 4), kd, 0);
  ts_params_add(p, "fc1.bias", ts_shape1(8), un, TS_PARAM_NO_DECAY);
  if (variant == 0) ts_params_add(p, "bn.running_mean", ts_shape1(8), un, TS_PARAM_STATE);
  int o = variant == 0 ? 3 : 4;
  ts_params_add(p, "fc2.weight", ts_shape2(o, 8), kd, 0);
  ts_params_add(p, "fc2.bias", ts_shape1(o), un, TS_PARAM_NO_DECAY);
  if (variant == 1) ts_params_add(p, "fc3.weight", ts_shape2(2, 2), kd, 0);
  CHECK_OK(ts_params_alloc(p, seed));
  return p;
}

static ts_optim *make_optim(ts_params *ps, ts_optim_kind kind) {
  ts_optim_segment segs[16];
  int n = 0;
  for (int i = 0; i < ts_params_count(ps); i++) {
    if (ts_params_flags(ps, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(ps, i);
    segs[n++] = (ts_optim_segment){ts_params_name(ps, i), ts_params_offset(ps, i),
                                   (size_t)ts_shape_numel(&s),
                                   ts_params_flags(ps, i) & TS_PARAM_NO_DECAY ? TS_SEG_NO_DECAY : 0};
  }
  ts_optim_config cfg = ts_optim_config_default(kind);
  ts_optim *o;
  CHECK_OK(ts_optim_create(&o, &cfg, segs, n));
  return o;
}

/* n optimizer steps with deterministic gradients depending on (seed, step); the running mean
 * changes too. */
static void train(ts_params *ps, ts_optim *o, int n, uint64_t seed) {
  for (int s = 0; s < n; s++) {
    int64_t step = ts_optim_get_step(o);
    ts_test_fill(ts_params_grads(ps), ts_params_numel(ps), seed * 1000 + (uint64_t)step, -1, 1);
    CHECK_OK(ts_optim_step(o, ts_params_data(ps), ts_params_grads(ps), 1e-2f));
    float *st = ts_params_states(ps);
    for (size_t i = 0; i < ts_params_state_numel(ps); i++) st[i] = 0.9f * st[i] + 0.1f * (float)s;
  }
}

static int same_state(ts_params *a, ts_optim *oa, ts_params *b, ts_optim *ob) {
  if (ts_params_numel(a) != ts_params_numel(b)) return 0;
  if (memcmp(ts_params_data(a), ts_params_data(b), ts_params_numel(a) * sizeof(float))) return 0;
  if (memcmp(ts_params_states(a), ts_params_states(b), ts_params_state_numel(a) * sizeof(float)))
    return 0;
  if (!oa) return 1;
  if (ts_optim_get_step(oa) != ts_optim_get_step(ob)) return 0;
  for (int k = 0; k < ts_optim_num_slots(oa); k++)
    if (memcmp(ts_optim_slot_data(oa, k), ts_optim_slot_data(ob, k),
               ts_optim_extent(oa) * sizeof(float)))
      return 0;
  return 1;
}

static ts_ckpt_state full_state(ts_params *ps, ts_optim *o, const char *yaml, uint64_t hash) {
  ts_ckpt_state st;
  memset(&st, 0, sizeof st);
  st.params = ps;
  st.optim = o;
  st.pos.step = 3;
  st.pos.epoch = 1;
  st.pos.batch_index = 7;
  st.pos.seed = 0xfedcba9876543210ULL;
  st.pos.rng_counter = 12345;
  st.pos.loss_scale = 1.0 / 3.0;
  st.pos.loss_scale_growth_tracker = 17;
  st.model = "mlp";
  st.config_hash = hash;
  st.config_yaml = yaml;
  return st;
}

static void test_round_trip(void) {
  ts_config cfg;
  CHECK_OK(ts_config_load(NULL, NULL, 0, &cfg));
  char *yaml;
  CHECK_OK(ts_config_dump_string(&cfg, &yaml));
  uint64_t hash = ts_config_hash(&cfg);

  ts_params *a = make_params(0, 1);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 3, 7);
  ts_ckpt_state st = full_state(a, oa, yaml, hash);
  const char *path = tpath("sub/dir/rt.safetensors"); /* directories are created */
  CHECK_OK(ts_ckpt_save(path, &st));

  /* the file is plain safetensors with the documented names */
  ts_st_file *f;
  CHECK_OK(ts_st_open(path, &f));
  CHECK(ts_st_index(f, "param.fc1.weight") >= 0 && ts_st_index(f, "state.bn.running_mean") >= 0);
  CHECK(ts_st_index(f, "optim.step") >= 0 && ts_st_index(f, "optim.exp_avg.fc1.weight") >= 0 &&
        ts_st_index(f, "optim.exp_avg_sq.fc2.bias") >= 0);
  CHECK(ts_st_count(f) == 5 + 1 + 2 * 4);
  CHECK(!strcmp(ts_st_meta(f, "tessera.format"), TS_CKPT_FORMAT));
  CHECK(!strcmp(ts_st_meta(f, "tessera.model"), "mlp"));
  CHECK(!strcmp(ts_st_meta(f, "tessera.config"), yaml));
  ts_st_close(f);

  /* load into a differently initialised model and a fresh optimizer: bitwise equal */
  ts_params *b = make_params(0, 99);
  ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
  CHECK(!same_state(a, oa, b, ob));
  ts_ckpt_state ld;
  memset(&ld, 0, sizeof ld);
  ld.params = b;
  ld.optim = ob;
  ld.model = "mlp";
  ld.config_hash = hash;
  CHECK_OK(ts_ckpt_load(path, &ld, 1));
  CHECK(same_state(a, oa, b, ob));
  CHECK(ts_optim_get_step(ob) == 3);
  CHECK(ld.pos.step == 3 && ld.pos.epoch == 1 && ld.pos.batch_index == 7);
  CHECK(ld.pos.seed == 0xfedcba9876543210ULL && ld.pos.rng_counter == 12345);
  CHECK(ld.pos.loss_scale == 1.0 / 3.0 && ld.pos.loss_scale_growth_tracker == 17);
  CHECK(ld.nloaded == 5 + 9 && ld.nmissing == 0 && ld.nunexpected == 0 && ld.nmismatched == 0);
  /* params only (no optimizer): the optim.* tensors are not asked for */
  ts_params *c = make_params(0, 5);
  ts_ckpt_state po = {.params = c};
  CHECK_OK(ts_ckpt_load(path, &po, 1));
  CHECK(po.nunexpected == 0 && po.nloaded == 5);
  CHECK(same_state(c, NULL, b, NULL));
  ts_params_free(c);
  /* resuming: two more steps on both give bitwise the same state */
  train(a, oa, 2, 7);
  train(b, ob, 2, 7);
  CHECK(same_state(a, oa, b, ob));

  /* info */
  ts_ckpt_info in;
  CHECK_OK(ts_ckpt_read_info(path, &in));
  CHECK(in.is_tessera && !strcmp(in.model, "mlp") && in.has_config_hash && in.config_hash == hash);
  CHECK(in.pos.step == 3 && in.pos.epoch == 1 && in.pos.batch_index == 7 && in.pos.loss_scale == 1.0 / 3.0);
  CHECK(in.config_yaml && !strcmp(in.config_yaml, yaml));
  CHECK(in.param_numel == 32 + 8 + 24 + 3 && in.state_numel == 8);
  CHECK(in.optim_numel == 1 + 2 * (32 + 8 + 24 + 3));
  CHECK(!strcmp(in.version, ts_version()));
  ts_ckpt_info_free(&in);
  /* the stored config loads back to the same config */
  ts_config back;
  CHECK_OK(ts_config_load_string(yaml, "stored", NULL, 0, &back));
  CHECK(ts_config_hash(&back) == hash);


  /* SGD (no slots) and momentum round trips */
  for (int k = 0; k < 2; k++) {
    ts_optim_kind kind = k ? TS_OPTIM_MOMENTUM : TS_OPTIM_SGD;
    ts_params *x = make_params(0, 3), *y = make_params(0, 4);
    ts_optim *ox = make_optim(x, kind), *oy = make_optim(y, kind);
    train(x, ox, 2, 11);
    ts_ckpt_state s = {.params = x, .optim = ox, .pos.step = 2};
    CHECK_OK(ts_ckpt_save(tpath("k.safetensors"), &s));
    ts_ckpt_state l = {.params = y, .optim = oy};
    CHECK_OK(ts_ckpt_load(tpath("k.safetensors"), &l, 1));
    CHECK(same_state(x, ox, y, oy) && l.pos.step == 2);
    ts_optim_free(ox);
    ts_optim_free(oy);
    ts_params_free(x);
    ts_params_free(y);
  }
  /* an unallocated store is refused */
  ts_params *u;
  ts_params_create(&u);
  ts_params_add(u, "w", ts_shape1(3), (ts_init){TS_INIT_ZEROS, 0, 0, 0}, 0);
  ts_ckpt_state su = {.params = u};
  CHECK(ts_ckpt_save(tpath("u.safetensors"), &su) == TS_EINVAL);
  CHECK(ts_ckpt_load(path, &su, 1) == TS_EINVAL);
  ts_params_free(u);

  ts_optim_free(oa);
  ts_optim_free(ob);
  ts_params_free(a);
  ts_params_free(b);
  free(yaml);
}

static void test_mismatch(void) {
  ts_params *a = make_params(0, 1);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 2, 3);
  ts_ckpt_state st = full_state(a, oa, NULL, 0x1111);
  const char *path = tpath("mm.safetensors");
  CHECK_OK(ts_ckpt_save(path, &st));

  /* variant 1: fc2 (4,8) instead of (3,8), fc3 extra, no bn.running_mean */
  ts_params *b = make_params(1, 2);
  ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
  size_t nb = ts_params_numel(b);
  float *snap = malloc(nb * sizeof(float));
  memcpy(snap, ts_params_data(b), nb * sizeof(float));
  ts_ckpt_state ld = {.params = b, .optim = ob};
  int rc = ts_ckpt_load(path, &ld, 1);
  const char *m = ts_last_error();
  CHECK(rc == TS_ECONFIG);
  CHECK_MSG(has(m, "mm.safetensors: does not match the model: "), "%s", m);
  CHECK_MSG(has(m, "missing (param.fc3.weight, optim.exp_avg.fc3.weight"), "%s", m);
  CHECK_MSG(has(m, "unexpected (state.bn.running_mean)"), "%s", m);
  CHECK_MSG(has(m, "mismatches (param.fc2.weight: shape (3,8) in the file vs (4,8) in the model"),
            "%s", m);
  CHECK(!strchr(m, '\n'));
  CHECK(ld.nmissing == 3 && ld.nunexpected == 1 && ld.nmismatched == 6 && ld.nloaded == 0);
  CHECK(!memcmp(snap, ts_params_data(b), nb * sizeof(float))); /* nothing modified */
  CHECK(ts_optim_get_step(ob) == 0);

  /* non-strict: the intersection is loaded, the rest reported through the log hook */
  g_log[0] = 0;
  ts_log_set_hook(log_hook, NULL);
  CHECK_OK(ts_ckpt_load(path, &ld, 0));
  ts_log_set_hook(NULL, NULL);
  CHECK_MSG(has(g_log, "missing param.fc3.weight (left as it is)"), "%s", g_log);
  CHECK(has(g_log, "unexpected state.bn.running_mean (ignored)"));
  CHECK(has(g_log, "param.fc2.weight: shape (3,8) in the file vs (4,8) in the model (not loaded)"));
  CHECK_MSG(has(g_log, "loaded 7 of 16 tensors (3 missing, 1 unexpected, 6 mismatched)"), "%s",
            g_log);
  CHECK_MSG(ld.nloaded == 7, "%d", ld.nloaded); /* fc1.*, their exp_avg(_sq), step */
  int w1a = ts_params_find(a, "fc1.weight"), w1b = ts_params_find(b, "fc1.weight");
  CHECK(!memcmp(ts_params_ptr(a, w1a), ts_params_ptr(b, w1b), 32 * sizeof(float)));
  int w2 = ts_params_find(b, "fc2.weight");
  CHECK(!memcmp(ts_params_ptr(b, w2), snap + ts_params_offset(b, w2), 32 * sizeof(float)));
  CHECK(ts_optim_get_step(ob) == 2 && ld.pos.step == 3);

  /* another model: refused in strict mode, warned about otherwise */
  ts_params *c = make_params(0, 5);
  ts_ckpt_state lc = {.params = c, .model = "resnet"};
  CHECK(ts_ckpt_load(path, &lc, 1) == TS_ECONFIG);
  CHECK_MSG(has(ts_last_error(), "mm.safetensors: a checkpoint of model 'mlp', not of 'resnet'"),
            "%s", ts_last_error());
  g_log[0] = 0;
  ts_log_set_hook(log_hook, NULL);
  CHECK_OK(ts_ckpt_load(path, &lc, 0));
  ts_log_set_hook(NULL, NULL);
  CHECK(has(g_log, "a checkpoint of model 'mlp', loading it into 'resnet'"));
  /* another configuration (config hash) */
  ts_ckpt_state lh = {.params = c, .model = "mlp", .config_hash = 0x2222};
  CHECK(ts_ckpt_load(path, &lh, 1) == TS_ECONFIG);
  CHECK_MSG(has(ts_last_error(), "written by another configuration (config hash 0000000000001111, "
                                 "this run 0000000000002222)"), "%s", ts_last_error());
  lh.config_hash = 0x1111;
  CHECK_OK(ts_ckpt_load(path, &lh, 1));
  /* a checkpoint saved without a hash is not refused for want of one */
  ts_ckpt_state nh = {.params = a, .model = "mlp"};
  CHECK_OK(ts_ckpt_save(tpath("nohash.safetensors"), &nh));
  ts_ckpt_info ni;
  CHECK_OK(ts_ckpt_read_info(tpath("nohash.safetensors"), &ni));
  CHECK(!ni.has_config_hash);
  ts_ckpt_info_free(&ni);
  CHECK_OK(ts_ckpt_load(tpath("nohash.safetensors"), &lh, 1));

  /* a dtype difference: strict refuses, non-strict converts */
  {
    ts_st_writer *w;
    ts_st_writer_create(&w);
    uint16_t bf[32];
    for (int i = 0; i < 32; i++) bf[i] = ts_f32_to_bf16((float)i * 0.5f);
    ts_st_writer_add(w, "param.fc1.weight", TS_BF16, ts_shape2(8, 4), bf);
    ts_st_writer_set_meta(w, "tessera.format", TS_CKPT_FORMAT);
    CHECK_OK(ts_st_write(w, tpath("bf.safetensors")));
    ts_st_writer_free(w);
    ts_params *d = make_params(0, 6);
    ts_ckpt_state sd = {.params = d};
    CHECK(ts_ckpt_load(tpath("bf.safetensors"), &sd, 1) == TS_ECONFIG);
    CHECK(has(ts_last_error(), "param.fc1.weight: dtype bf16 in the file vs f32 in the model"));
    ts_log_set_hook(log_hook, NULL);
    CHECK_OK(ts_ckpt_load(tpath("bf.safetensors"), &sd, 0));
    ts_log_set_hook(NULL, NULL);
    CHECK(ts_params_ptr(d, 0)[5] == 2.5f && sd.nloaded == 1);
    ts_params_free(d);
  }
  /* an unknown format version */
  {
    ts_st_writer *w;
    ts_st_writer_create(&w);
    ts_st_writer_set_meta(w, "tessera.format", "checkpoint/9");
    CHECK_OK(ts_st_write(w, tpath("v9.safetensors")));
    ts_st_writer_free(w);
    ts_ckpt_state s9 = {.params = c};
    CHECK(ts_ckpt_load(tpath("v9.safetensors"), &s9, 0) == TS_EFORMAT);
    CHECK(has(ts_last_error(), "checkpoint format 'checkpoint/9' is not supported"));
  }
  free(snap);
  ts_params_free(c);
  ts_optim_free(oa);
  ts_optim_free(ob);
  ts_params_free(a);
  ts_params_free(b);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}
static void spit(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
}

static void test_corrupt(void) {
  ts_params *a = make_params(0, 1);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 1, 1);
  ts_ckpt_state st = full_state(a, oa, "model: {name: mlp}\n", 5);
  const char *good = tpath("good.safetensors");
  CHECK_OK(ts_ckpt_save(good, &st));
  size_t n = 0;
  unsigned char *bytes = slurp(good, &n);
  CHECK(bytes && n > 200);

  ts_params *b = make_params(0, 2);
  ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
  float snap[80];
  memcpy(snap, ts_params_data(b), ts_params_numel(b) * sizeof(float));
  ts_ckpt_state ld = {.params = b, .optim = ob};
  /* truncated: data cut short, header cut short, only the length prefix, empty */
  size_t cuts[] = {n - 7, n / 2, 20, 8, 3, 0};
  for (int i = 0; i < 6; i++) {
    const char *p = tpath("trunc.safetensors");
    spit(p, bytes, cuts[i]);
    int rc = ts_ckpt_load(p, &ld, 0);
    CHECK_MSG(rc == TS_EFORMAT || rc == TS_EIO, "cut %zu: rc %d", cuts[i], rc);
    CHECK_MSG(has(ts_last_error(), "trunc.safetensors"), "%s", ts_last_error());
  }
  /* one flipped bit in the data: the CRC catches it */
  bytes[n - 5] ^= 0x10;
  spit(tpath("flip.safetensors"), bytes, n);
  CHECK(ts_ckpt_load(tpath("flip.safetensors"), &ld, 0) == TS_EFORMAT);
  CHECK_MSG(has(ts_last_error(), "flip.safetensors") && has(ts_last_error(), "CRC"), "%s",
            ts_last_error());
  bytes[n - 5] ^= 0x10;
  /* garbage in the header */
  bytes[12] = '#';
  spit(tpath("hdr.safetensors"), bytes, n);
  CHECK(ts_ckpt_load(tpath("hdr.safetensors"), &ld, 0) == TS_EFORMAT);
  CHECK(has(ts_last_error(), "hdr.safetensors"));
  /* a malformed metadata value */
  {
    ts_st_writer *w;
    ts_st_writer_create(&w);
    ts_st_writer_set_meta(w, "tessera.format", TS_CKPT_FORMAT);
    ts_st_writer_set_meta(w, "tessera.step", "12x");
    CHECK_OK(ts_st_write(w, tpath("meta.safetensors")));
    ts_st_writer_free(w);
    CHECK(ts_ckpt_load(tpath("meta.safetensors"), &ld, 0) == TS_EFORMAT);
    CHECK(has(ts_last_error(), "meta.safetensors: metadata tessera.step = '12x' is not an integer"));
  }
  /* missing file */
  CHECK(ts_ckpt_load(tpath("nope.safetensors"), &ld, 1) == TS_EIO);
  CHECK(has(ts_last_error(), "nope.safetensors"));
  /* nothing was modified by any of these */
  CHECK(!memcmp(snap, ts_params_data(b), ts_params_numel(b) * sizeof(float)));
  CHECK(ts_optim_get_step(ob) == 0);
  /* saving to an unwritable place fails cleanly */
  CHECK(ts_ckpt_save("/proc/nope/x.safetensors", &st) == TS_EIO);
  free(bytes);
  ts_optim_free(oa);
  ts_optim_free(ob);
  ts_params_free(a);
  ts_params_free(b);
}

static int exists(const char *p) {
  struct stat s;
  return stat(p, &s) == 0;
}

static void test_rotate_latest(void) {
  char dir[600], buf[700];
  snprintf(dir, sizeof dir, "%s/rot", g_dir);
  CHECK(ts_ckpt_latest(dir, "ckpt", buf, sizeof buf) == TS_ENOTFOUND); /* no dir */
  CHECK(has(ts_last_error(), "no checkpoint ckpt-*.safetensors or complete ckpt-*/ in"));
  CHECK(ts_ckpt_rotate(dir, "ckpt", 2) == 0);
  ts_params *a = make_params(0, 1);
  ts_ckpt_state st = {.params = a};
  int64_t steps[] = {5, 10, 100, 7};
  for (int i = 0; i < 4; i++) {
    char p[700];
    CHECK_OK(ts_ckpt_path(p, sizeof p, dir, "ckpt", steps[i]));
    st.pos.step = steps[i];
    CHECK_OK(ts_ckpt_save(p, &st));
  }
  CHECK_OK(ts_ckpt_path(buf, sizeof buf, dir, "ckpt", 5));
  CHECK(has(buf, "/rot/ckpt-00000005.safetensors"));
  CHECK(ts_ckpt_path(buf, 10, dir, "ckpt", 5) == TS_ERANGE);
  CHECK_OK(ts_ckpt_path(buf, sizeof buf, "", "p", 123456789));
  CHECK(!strcmp(buf, "p-123456789.safetensors"));
  /* decoys that must be left alone */
  const char *decoys[] = {"ckpt-abc.safetensors", "other-00000001.safetensors",
                          "ckpt-00000003.safetensors.tmp.1.0", "ckpt-12.txt", "ckpt.safetensors",
                          "ckptx-00000001.safetensors"};
  for (int i = 0; i < 6; i++) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, decoys[i]);
    spit(p, "x", 1);
  }
  CHECK_OK(ts_ckpt_latest(dir, "ckpt", buf, sizeof buf));
  CHECK_MSG(has(buf, "/rot/ckpt-00000100.safetensors"), "%s", buf);
  ts_ckpt_state ld = {.params = a};
  CHECK_OK(ts_ckpt_load(buf, &ld, 1));
  CHECK(ld.pos.step == 100);
  /* ts_ckpt_find walks the series down from `before` (newest first), by name */
  int64_t found = -1, want[] = {100, 10, 7, 5};
  int64_t before = INT64_MAX;
  for (int i = 0; i < 4; i++) {
    CHECK_OK(ts_ckpt_find(dir, "ckpt", before, buf, sizeof buf, &found));
    char w[700];
    ts_ckpt_path(w, sizeof w, dir, "ckpt", want[i]);
    CHECK_MSG(found == want[i] && !strcmp(buf, w), "step %lld: %s", (long long)found, buf);
    before = found;
  }
  CHECK(ts_ckpt_find(dir, "ckpt", before, buf, sizeof buf, &found) == TS_ENOTFOUND);
  CHECK_MSG(has(ts_last_error(), "no checkpoint ckpt-*.safetensors or complete ckpt-*/ before step 5 in"), "%s", ts_last_error());
  CHECK(buf[0] == 0);
  CHECK_OK(ts_ckpt_find(dir, "ckpt", 8, buf, sizeof buf, NULL)); /* between two: the one below */
  CHECK(has(buf, "/rot/ckpt-00000007.safetensors"));
  CHECK(ts_ckpt_find(dir, "ckpt", 8, buf, 10, NULL) == TS_ERANGE);
  CHECK(ts_ckpt_rotate(dir, "ckpt", 0) == 0);
  CHECK(ts_ckpt_rotate(dir, "ckpt", 2) == 2);
  char p[700];
  ts_ckpt_path(p, sizeof p, dir, "ckpt", 5);
  CHECK(!exists(p));
  ts_ckpt_path(p, sizeof p, dir, "ckpt", 7);
  CHECK(!exists(p));
  ts_ckpt_path(p, sizeof p, dir, "ckpt", 10);
  CHECK(exists(p));
  ts_ckpt_path(p, sizeof p, dir, "ckpt", 100);
  CHECK(exists(p));
  for (int i = 0; i < 6; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, decoys[i]);
    CHECK_MSG(exists(p), "decoy %s was deleted", decoys[i]);
  }
  CHECK(ts_ckpt_rotate(dir, "ckpt", 2) == 0);
  CHECK(ts_ckpt_rotate(dir, "ckpt", 1) == 1);
  ts_params_free(a);
}

static void test_export(void) {
  ts_params *a = make_params(0, 1);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 2, 2);
  ts_ckpt_state st = full_state(a, oa, "x: 1\n", 9);
  CHECK_OK(ts_ckpt_save(tpath("ex.safetensors"), &st));
  const char *out = tpath("export/model.safetensors");
  CHECK_OK(ts_ckpt_export_params(tpath("ex.safetensors"), out));
  ts_st_file *f;
  CHECK_OK(ts_st_open(out, &f));
  CHECK(ts_st_count(f) == 5);
  const char *names[] = {"fc1.weight", "fc1.bias", "bn.running_mean", "fc2.weight", "fc2.bias"};
  for (int i = 0; i < 5; i++) {
    int id = ts_params_find(a, names[i]);
    ts_tensor v;
    CHECK_OK(ts_st_find(f, names[i], &v));
    ts_shape s = ts_params_shape(a, id);
    CHECK(v.dtype == TS_F32 && ts_shape_equal(&v.shape, &s));
    CHECK(!memcmp(v.data, ts_params_ptr(a, id), ts_tensor_nbytes(&v)));
  }
  for (int i = 0; i < ts_st_count(f); i++)
    CHECK(strncmp(ts_st_name(f, i), "optim.", 6) && strncmp(ts_st_name(f, i), "param.", 6));
  CHECK(!strcmp(ts_st_meta(f, "format"), "pt"));
  CHECK(!strcmp(ts_st_meta(f, "tessera.model"), "mlp"));
  CHECK(ts_st_meta(f, "tessera.format") == NULL && ts_st_meta(f, "tessera.config") == NULL);
  ts_st_close(f);
  /* the export loads back as parameters (plain names) */
  ts_params *b = make_params(0, 7);
  ts_ckpt_state ld = {.params = b, .model = "resnet", .config_hash = 1, .pos.step = 42};
  CHECK_OK(ts_ckpt_load(out, &ld, 1)); /* no identity metadata: nothing to refuse */
  CHECK(same_state(a, NULL, b, NULL));
  CHECK(ld.pos.step == 42); /* no training position in an export */
  ts_ckpt_info in;
  CHECK_OK(ts_ckpt_read_info(out, &in));
  CHECK(!in.is_tessera && in.param_numel == 32 + 8 + 8 + 24 + 3);
  ts_ckpt_info_free(&in);
  /* ...but not as a training state: it has no optimizer state */
  ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
  ts_ckpt_state lo = {.params = b, .optim = ob};
  CHECK(ts_ckpt_load(out, &lo, 1) == TS_ECONFIG);
  CHECK_MSG(has(ts_last_error(), "not a Tessera checkpoint") &&
                has(ts_last_error(), "no optimizer state (9 tensors expected)"),
            "%s", ts_last_error());
  /* exporting an export (not a tessera checkpoint) */
  CHECK(ts_ckpt_export_params(out, tpath("e2.safetensors")) == TS_EFORMAT);
  CHECK(has(ts_last_error(), "not a tessera checkpoint"));
  CHECK(ts_ckpt_export_params(tpath("missing.safetensors"), tpath("e3.safetensors")) == TS_EIO);
  ts_optim_free(oa);
  ts_optim_free(ob);
  ts_params_free(a);
  ts_params_free(b);
}

static void rm_rf(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      rm_rf(p);
    }
    closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* A plain safetensors file (numpy / safetensors.torch save_file: no tessera.* metadata) loaded
 * as a checkpoint: matched by plain name or by Tessera's own names, never the same name listed
 * as both missing and unexpected, and the message says what the file is. */
static void test_plain_file(void) {
  ts_params *a = make_params(0, 1);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 2, 3);
  /* 1. Tessera's names without the metadata (a checkpoint re-saved by numpy): loads */
  {
    ts_st_writer *w;
    ts_st_writer_create(&w);
    for (int i = 0; i < ts_params_count(a); i++) {
      char n[128];
      snprintf(n, sizeof n, "%s%s", ts_params_flags(a, i) & TS_PARAM_STATE ? "state." : "param.",
               ts_params_name(a, i));
      ts_st_writer_add(w, n, TS_F32, ts_params_shape(a, i), ts_params_ptr(a, i));
    }
    CHECK_OK(ts_st_write(w, tpath("plain_prefixed.safetensors")));
    ts_st_writer_free(w);
    ts_params *b = make_params(0, 9);
    ts_ckpt_state ld = {.params = b};
    int rc = ts_ckpt_load(tpath("plain_prefixed.safetensors"), &ld, 1);
    CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
    CHECK(!memcmp(ts_params_data(a), ts_params_data(b), ts_params_numel(a) * sizeof(float)));
    /* with an optimizer: a plain file has no optimizer state, said once, not name by name */
    ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
    ts_ckpt_state lo = {.params = b, .optim = ob};
    rc = ts_ckpt_load(tpath("plain_prefixed.safetensors"), &lo, 1);
    const char *m = ts_last_error();
    CHECK(rc == TS_ECONFIG);
    CHECK_MSG(has(m, "not a Tessera checkpoint"), "%s", m);
    CHECK_MSG(has(m, "no optimizer state"), "%s", m);
    CHECK_MSG(!has(m, "unexpected"), "%s", m);
    ts_optim_free(ob);
    ts_params_free(b);
  }
  /* 2. other names: the differences, each name once */
  {
    ts_st_writer *w;
    ts_st_writer_create(&w);
    ts_st_writer_add(w, "fc1.weight", TS_F32, ts_params_shape(a, 0), ts_params_ptr(a, 0));
    ts_st_writer_add(w, "param.fc9.weight", TS_F32, ts_shape2(8, 4), ts_params_ptr(a, 0));
    CHECK_OK(ts_st_write(w, tpath("plain_other.safetensors")));
    ts_st_writer_free(w);
    ts_params *b = make_params(0, 9);
    ts_ckpt_state ld = {.params = b};
    int rc = ts_ckpt_load(tpath("plain_other.safetensors"), &ld, 1);
    const char *m = ts_last_error();
    CHECK(rc == TS_ECONFIG);
    CHECK_MSG(has(m, "plain_other.safetensors: not a Tessera checkpoint (no tessera.format metadata;"),
              "%s", m);
    CHECK_MSG(has(m, "missing (fc1.bias, bn.running_mean, fc2.weight, fc2.bias)"), "%s", m);
    CHECK_MSG(has(m, "unexpected (param.fc9.weight)"), "%s", m);
    CHECK(!strchr(m, '\n'));
    ts_params_free(b);
  }
  ts_optim_free(oa);
  ts_params_free(a);
}

/* Temporary files of killed saves ("<prefix>-<step>.safetensors.tmp.<pid>.<n>", the atomic
 * writer's naming) are removed when the series is saved again or cleaned; nothing else is. */
static void test_clean_temps(void) {
  char dir[600], p[800];
  snprintf(dir, sizeof dir, "%s/temps", g_dir);
  mkdir(dir, 0777);
  const char *stale[] = {"ckpt-00000003.safetensors.tmp.2147483646.0",
                         "ckpt-00000010.safetensors.tmp.2147483645.17"};
  const char *keep[] = {"ckpt-00000003.safetensors.tmp.1.0", /* pid 1 runs */
                        "other-00000003.safetensors.tmp.2147483646.0", /* another prefix */
                        "ckpt-abc.safetensors.tmp.2147483646.0", "ckpt-00000003.safetensors.tmp",
                        "ckpt-00000003.safetensors.tmp.2147483646.0x", "ckpt-00000003.safetensors",
                        "notes.txt"};
  for (int i = 0; i < 2; i++) snprintf(p, sizeof p, "%s/%s", dir, stale[i]), spit(p, "x", 1);
  for (int i = 0; i < 7; i++) snprintf(p, sizeof p, "%s/%s", dir, keep[i]), spit(p, "x", 1);
  CHECK(ts_ckpt_clean_temps(dir, "ckpt") == 2);
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, stale[i]);
    CHECK_MSG(!exists(p), "stale %s kept", stale[i]);
  }
  for (int i = 0; i < 7; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, keep[i]);
    CHECK_MSG(exists(p), "%s was deleted", keep[i]);
  }
  CHECK(ts_ckpt_clean_temps(dir, "ckpt") == 0);
  char missing[700];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK(ts_ckpt_clean_temps(missing, "ckpt") == 0);
  /* a save of the series cleans too */
  snprintf(p, sizeof p, "%s/%s", dir, stale[0]);
  spit(p, "x", 1);
  ts_params *a = make_params(0, 1);
  ts_ckpt_state st = {.params = a, .pos.step = 20};
  char cp[700];
  CHECK_OK(ts_ckpt_path(cp, sizeof cp, dir, "ckpt", 20));
  CHECK_OK(ts_ckpt_save(cp, &st));
  CHECK_MSG(!exists(p), "a save left the stale %s", stale[0]);
  snprintf(p, sizeof p, "%s/%s", dir, keep[1]);
  CHECK(exists(p));
  ts_params_free(a);
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb, ca, cb;
  while (same) {
    ca = fgetc(fa);
    cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* A snapshot written after the store and optimizer moved on is the state of the step it was
 * taken at: byte for byte ts_ckpt_save's file of that state; a second take into the same
 * snapshot reuses its buffer and gives the later state's file. */
static void test_snapshot(void) {
  char *yaml = strdup("model: {name: mlp}\n");
  ts_params *a = make_params(0, 3);
  ts_optim *oa = make_optim(a, TS_OPTIM_ADAMW);
  train(a, oa, 2, 11);
  ts_ckpt_state st = full_state(a, oa, yaml, 0x1234);
  ts_ckpt_snapshot *snap = NULL;
  CHECK_OK(ts_ckpt_snapshot_take(&st, &snap));
  size_t cap = ts_ckpt_snapshot_bytes(snap);
  CHECK(cap == (ts_params_numel(a) + ts_params_state_numel(a) + 2 * ts_optim_extent(oa)) * sizeof(float) + 8);
  CHECK_OK(ts_ckpt_save(tpath("snap_sync2.safetensors"), &st)); /* the reference, before moving on */
  yaml[0] = 'X';                                                 /* the caller's strings may change too */
  train(a, oa, 1, 12);
  CHECK_OK(ts_ckpt_snapshot_save(snap, tpath("snap_async2.safetensors")));
  CHECK(same_file(tpath("snap_sync2.safetensors"), tpath("snap_async2.safetensors")));
  /* the later state: the store changed, so the files differ; the same buffer serves */
  st = full_state(a, oa, yaml, 0x1234);
  st.pos.step = 4;
  CHECK_OK(ts_ckpt_snapshot_take(&st, &snap));
  CHECK(ts_ckpt_snapshot_bytes(snap) == cap);
  CHECK_OK(ts_ckpt_save(tpath("snap_sync3.safetensors"), &st));
  CHECK_OK(ts_ckpt_snapshot_save(snap, tpath("snap_async3.safetensors")));
  CHECK(same_file(tpath("snap_sync3.safetensors"), tpath("snap_async3.safetensors")));
  CHECK(!same_file(tpath("snap_sync2.safetensors"), tpath("snap_async3.safetensors")));
  /* and it loads as a checkpoint of step 4 */
  ts_params *b = make_params(0, 77);
  ts_optim *ob = make_optim(b, TS_OPTIM_ADAMW);
  ts_ckpt_state ld = full_state(b, ob, NULL, 0x1234);
  CHECK_OK(ts_ckpt_load(tpath("snap_async3.safetensors"), &ld, 1));
  CHECK(ld.pos.step == 4 && same_state(a, oa, b, ob));
  CHECK(ts_ckpt_snapshot_take(NULL, &snap) == TS_EINVAL && ts_ckpt_snapshot_save(snap, NULL) == TS_EINVAL);
  ts_ckpt_snapshot_free(snap);
  ts_ckpt_snapshot_free(NULL);
  ts_optim_free(oa);
  ts_optim_free(ob);
  ts_params_free(a);
  ts_params_free(b);
  free(yaml);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_ckpt_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  test_round_trip();
  test_mismatch();
  test_corrupt();
  test_rotate_latest();
  test_export();
  test_plain_file();
  test_clean_temps();
  test_snapshot();
  rm_rf(g_dir);
  return ts_test_finish("test_checkpoint");
}
