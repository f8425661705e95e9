/* Sliced checkpoints in one process (src/io/ckpt_sliced.c, ckpt_manifest.c), on a made-up model of
 * three tensors: W (8,16) cut by columns over 4 writers (boxes), V (26) cut into ZeRO-like ranges
 * (one writer's empty), "optim.step" held by writer 0, plus W's optimizer slot held as ranges of
 * two row boxes (a part of a slice).
 *  - written (rank files, manifest, staging directory committed), verified, inspected through
 *    the manifest's accessors;
 *  - loaded into other cuts: W by rows, W seen as (2,4,16) cut on its middle dim, a range of a
 *    box, V whole and in other ranges: every element equal to the truth; only the rank files that
 *    hold wanted pieces are opened (the others are removed first and the load still works);
 *  - merged into one whole file whose tensors are the truth, with the manifest's metadata;
 *  - refused, each naming the file or tensor: a flipped byte (verify: SHA-256; load: the chunk's
 *    CRC; a load not touching that file still works), a missing rank file, a missing manifest,
 *    a wrong hash in the manifest, a manifest missing a piece (check, and the load's count),
 *    another model or config hash, missing and unexpected tensors;
 *  - a second commit of the same step replaces the directory atomically;
 *  - ts_ckpt_latest / rotate / clean_temps with sliced directories: incomplete ones do not count
 *    and are cleaned, dead writers' staging directories are removed, rotation removes whole
 *    directories. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "test_util.h"

static char g_dir[256];
static float W[8 * 16], V[26], S[8 * 16];
static int64_t STEP = 42;

static void truth(void) {
  for (int i = 0; i < 128; i++) W[i] = (float)i + 0.25f, S[i] = -(float)i;
  for (int i = 0; i < 26; i++) V[i] = 1000.f + (float)i;
}

/* Writer r's pieces (data pointing into the truth, in each region's order; buf is scratch). */
static void pieces_of(int r, ts_piece_list *l, float *buf) {
  ts_shape sw = ts_shape2(8, 16), sv = ts_shape1(26), s0 = ts_shape_make(0, NULL), sflat = ts_shape1(128);
  ts_region reg;
  /* W: columns [4r, 4r + 4) */
  ts_region_box(&reg, &sw, (int64_t[]){0, 4 * r}, (int64_t[]){8, 4});
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) buf[i * 4 + j] = W[i * 16 + 4 * r + j];
  CHECK_OK(ts_piece_list_add_copy(l, "param.W", TS_F32, &sw, &reg, buf));
  /* V: uneven ranges, writer 3's empty */
  int64_t cut[5] = {0, 7, 14, 26, 26};
  ts_region_range(&reg, &sv, cut[r], cut[r + 1]);
  if (cut[r + 1] > cut[r]) CHECK_OK(ts_piece_list_add(l, "param.V", TS_F32, &sv, &reg, V + cut[r]));
  /* the slot of W (a 1-d tensor in a whole checkpoint): writers 0, 1 hold rows [0,4) as ranges
   * [0,40) and [40,64) of that box; writers 2, 3 rows [4,8) likewise */
  int64_t row0 = r < 2 ? 0 : 4, lo = r % 2 ? 40 : 0, hi = r % 2 ? 64 : 40;
  ts_region_box(&reg, &sw, (int64_t[]){row0, 0}, (int64_t[]){4, 16});
  ts_region_restrict(&reg, lo, hi);
  CHECK_OK(ts_piece_list_add(l, "optim.exp_avg.W", TS_F32, &sflat, &reg, S + row0 * 16 + lo));
  if (r == 0) {
    ts_region_whole(&reg, &s0);
    CHECK_OK(ts_piece_list_add(l, "optim.step", TS_I64, &s0, &reg, &STEP));
  }
}

static ts_ckpt_state meta(void) {
  ts_ckpt_state st;
  memset(&st, 0, sizeof st);
  st.model = "toy";
  st.config_hash = 0x1234abcdull;
  st.config_yaml = "model: {name: toy}\n";
  st.pos.step = 42;
  st.pos.epoch = 1;
  st.pos.batch_index = 2;
  st.pos.seed = 18446744073709551615ull;
  st.pos.rng_counter = 42;
  st.pos.loss_scale = 0.1;
  st.pos.loss_scale_growth_tracker = 3;
  return st;
}

static void add_tensors(ts_ckpt_manifest *m) {
  ts_shape sw = ts_shape2(8, 16), sv = ts_shape1(26), s0 = ts_shape_make(0, NULL), sflat = ts_shape1(128);
  CHECK_OK(ts_ckpt_manifest_add_tensor(m, "param.W", TS_F32, &sw));
  CHECK_OK(ts_ckpt_manifest_add_tensor(m, "param.V", TS_F32, &sv));
  CHECK_OK(ts_ckpt_manifest_add_tensor(m, "optim.step", TS_I64, &s0));
  CHECK_OK(ts_ckpt_manifest_add_tensor(m, "optim.exp_avg.W", TS_F32, &sflat));
}

/* Writes the checkpoint at final; skip: a writer whose record is left out (-1: none). */
static int save(const char *final, int skip) {
  char staging[512];
  int rc = ts_ckpt_stage_begin(final, staging, sizeof staging);
  CHECK_OK(rc);
  ts_ckpt_state st = meta();
  ts_ckpt_manifest *m;
  CHECK_OK(ts_ckpt_manifest_create(&st, "toy-42-test", 4, &m));
  add_tensors(m);
  CHECK_OK(ts_ckpt_manifest_set_layout(m, "{\"mode\": \"made up\", \"ranks\": 4}"));
  for (int r = 0; r < 4; r++) {
    ts_piece_list l = {0};
    float buf[64];
    pieces_of(r, &l, buf);
    char *rec = NULL;
    CHECK_OK(ts_ckpt_slice_write(staging, r, "toy-42-test", 42, l.v, l.n, &rec));
    if (r != skip) CHECK_OK(ts_ckpt_manifest_add_record(m, rec));
    free(rec);
    ts_piece_list_free(&l);
  }
  rc = ts_ckpt_manifest_check(m);
  if (!rc) CHECK_OK(ts_ckpt_manifest_write(m, staging));
  if (!rc) CHECK_OK(ts_ckpt_stage_commit(staging, final));
  else ts_ckpt_stage_abort(staging);
  ts_ckpt_manifest_free(m);
  return rc;
}

/* Loads W by rows [4,8), W as (2,4,16) [:, 1:3, :], elements [10, 30) of W's column box 1, V
 * whole and [5, 20), the slot whole, the step; checks everything against the truth. */
static int load_and_check(const char *dir, int expect_ok) {
  ts_ckpt_manifest *m;
  int rc = ts_ckpt_manifest_load(dir, &m);
  if (rc) return rc;
  ts_shape sw = ts_shape2(8, 16), s3 = ts_shape3(2, 4, 16), sv = ts_shape1(26), s0 = ts_shape_make(0, NULL),
           sflat = ts_shape1(128);
  float a[64], b[64], c[20], d[26], e[15], slot[128];
  int64_t step = 0;
  ts_piece_list l = {0};
  ts_region r;
  ts_region_box(&r, &sw, (int64_t[]){4, 0}, (int64_t[]){4, 16});
  ts_piece_list_add(&l, "param.W", TS_F32, &sw, &r, a);
  ts_region_box(&r, &s3, (int64_t[]){0, 1, 0}, (int64_t[]){2, 2, 16});
  ts_piece_list_add(&l, "param.W", TS_F32, &sw, &r, b);
  ts_region_box(&r, &sw, (int64_t[]){0, 4}, (int64_t[]){8, 4});
  ts_region_restrict(&r, 10, 30);
  ts_piece_list_add(&l, "param.W", TS_F32, &sw, &r, c);
  ts_region_whole(&r, &sv);
  ts_piece_list_add(&l, "param.V", TS_F32, &sv, &r, d);
  ts_region_range(&r, &sv, 5, 20);
  ts_piece_list_add(&l, "param.V", TS_F32, &sv, &r, e);
  ts_region_whole(&r, &sflat);
  ts_piece_list_add(&l, "optim.exp_avg.W", TS_F32, &sflat, &r, slot);
  ts_region_whole(&r, &s0);
  ts_piece_list_add(&l, "optim.step", TS_I64, &s0, &r, &step);
  rc = ts_ckpt_sliced_read(m, l.v, l.n, 1);
  if (!rc && expect_ok) {
    int ok = step == 42;
    for (int i = 0; i < 64; i++) ok &= a[i] == W[64 + i];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 32; j++) ok &= b[i * 32 + j] == W[i * 64 + 16 + j];
    for (int i = 0; i < 20; i++) ok &= c[i] == W[(10 + i) / 4 * 16 + 4 + (10 + i) % 4];
    for (int i = 0; i < 26; i++) ok &= d[i] == V[i];
    for (int i = 0; i < 15; i++) ok &= e[i] == V[5 + i];
    for (int i = 0; i < 128; i++) ok &= slot[i] == S[i];
    CHECK_MSG(ok, "%s: loaded pieces differ from the truth", dir);
  }
  ts_piece_list_free(&l);
  ts_ckpt_manifest_free(m);
  return rc;
}

static void flip(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, at, SEEK_END);
  int c = fgetc(f);
  fseek(f, at, SEEK_END);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

static void copy_file(const char *a, const char *b) {
  FILE *x = fopen(a, "rb"), *y = fopen(b, "wb");
  int c;
  while (x && y && (c = fgetc(x)) != EOF) fputc(c, y);
  if (x) fclose(x);
  if (y) fclose(y);
}

static void rm_rf(const char *p) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  if (system(cmd)) {
  }
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_ckpt_sliced_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  truth();
  char dir[512], path[700], sum[600], r2c[700];
  snprintf(r2c, sizeof r2c, "%s/r2.copy", g_dir);
  CHECK_OK(ts_ckpt_dir_path(dir, sizeof dir, g_dir, "ckpt", 42));
  CHECK(!strcmp(dir + strlen(g_dir), "/ckpt-00000042"));
  CHECK_OK(save(dir, -1));
  CHECK(ts_ckpt_is_sliced(dir));
  CHECK_OK(ts_ckpt_verify(dir, sum, sizeof sum));
  CHECK(strstr(sum, "4 files") && strstr(sum, "4 tensors"));
  /* writer 3 holds an empty V range: it still has W's and the slot's pieces */
  ts_ckpt_manifest *m;
  CHECK_OK(ts_ckpt_manifest_load(dir, &m));
  if (m) {
    ts_ckpt_info in;
    CHECK_OK(ts_ckpt_manifest_info(m, &in));
    CHECK(in.pos.step == 42 && in.pos.epoch == 1 && in.pos.batch_index == 2 && in.pos.seed == 18446744073709551615ull &&
          in.pos.loss_scale == 0.1 && in.pos.loss_scale_growth_tracker == 3 && in.config_hash == 0x1234abcdull &&
          !strcmp(in.model, "toy") && in.config_yaml && !strcmp(in.config_yaml, "model: {name: toy}\n") &&
          in.param_numel == 128 + 26 && in.optim_numel == 129 && in.ntensors == 4);
    ts_ckpt_info_free(&in);
    const char *name;
    int np;
    CHECK_OK(ts_ckpt_manifest_tensor(m, 1, &name, NULL, NULL, &np));
    CHECK(!strcmp(name, "param.V") && np == 3);
    CHECK(ts_ckpt_manifest_world_size(m) == 4 && strstr(ts_ckpt_manifest_layout(m), "made up"));
    /* identity and tensors against a model */
    ts_piece_list t = {0};
    ts_shape sw = ts_shape2(8, 16), sv = ts_shape1(26), sx = ts_shape1(3);
    ts_region r;
    ts_region_whole(&r, &sw);
    ts_piece_list_add(&t, "param.W", TS_F32, &sw, &r, NULL);
    ts_region_whole(&r, &sv);
    ts_piece_list_add(&t, "param.V", TS_F32, &sv, &r, NULL);
    ts_ckpt_state ex = meta();
    CHECK_OK(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 0, 1)); /* without the optimizer */
    EXPECT_ERR(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 1, 1), TS_ECONFIG, "2 unexpected", "optim.step");
    ex.model = "other";
    EXPECT_ERR(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 0, 1), TS_ECONFIG, "model 'toy'", "'other'");
    ex = meta();
    ex.config_hash = 7;
    EXPECT_ERR(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 0, 1), TS_ECONFIG, "another configuration");
    ex = meta();
    ts_region_whole(&r, &sx);
    ts_piece_list_add(&t, "param.X", TS_F32, &sx, &r, NULL);
    t.v[1].shape = ts_shape1(25);
    t.v[1].region.dims[0] = 25;
    EXPECT_ERR(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 0, 1), TS_ECONFIG, "1 missing (param.X)", "param.V: f32 (26)");
    CHECK_OK(ts_ckpt_manifest_match(m, &ex, t.v, t.n, 0, 0)); /* non-strict: warned */
    ts_piece_list_free(&t);
    ts_ckpt_manifest_free(m);
  }
  CHECK_OK(load_and_check(dir, 1));
  /* merge: one whole file with the truth and the manifest's metadata */
  snprintf(path, sizeof path, "%s/whole.safetensors", g_dir);
  CHECK_OK(ts_ckpt_merge(dir, path, NULL));
  ts_st_file *f;
  CHECK_OK(ts_st_open(path, &f));
  if (f) {
    ts_tensor v;
    CHECK(ts_st_count(f) == 4 && !strcmp(ts_st_name(f, 0), "param.W") && !strcmp(ts_st_name(f, 3), "optim.exp_avg.W"));
    CHECK_OK(ts_st_find(f, "param.W", &v));
    CHECK(!memcmp(v.data, W, sizeof W));
    CHECK_OK(ts_st_find(f, "param.V", &v));
    CHECK(!memcmp(v.data, V, sizeof V));
    CHECK_OK(ts_st_find(f, "optim.exp_avg.W", &v));
    CHECK(!memcmp(v.data, S, sizeof S) && v.shape.ndim == 1);
    CHECK_OK(ts_st_find(f, "optim.step", &v));
    CHECK(v.dtype == TS_I64 && *(int64_t *)v.data == 42);
    CHECK(!strcmp(ts_st_meta(f, "tessera.format"), TS_CKPT_FORMAT) && !strcmp(ts_st_meta(f, "tessera.step"), "42") &&
          !strcmp(ts_st_meta(f, "tessera.seed"), "18446744073709551615") &&
          !strcmp(ts_st_meta(f, "tessera.config_hash"), "000000001234abcd") &&
          !strcmp(ts_st_meta(f, "tessera.version"), ts_version()));
    ts_st_close(f);
  }
  /* only the rank files holding wanted pieces are opened: with the rank files kept aside,
   * a piece of rank 1 alone loads with the other files gone */
  ts_ckpt_manifest_load(dir, &m);
  if (m) {
    char keep[4][700], aside[4][700];
    for (int r = 0; r < 4; r++) {
      snprintf(keep[r], sizeof keep[r], "%s/rank%05d.safetensors", dir, r);
      snprintf(aside[r], sizeof aside[r], "%s/aside%d", g_dir, r);
      if (r != 1) CHECK(rename(keep[r], aside[r]) == 0);
    }
    ts_shape sw = ts_shape2(8, 16);
    ts_region r;
    float col[32];
    ts_region_box(&r, &sw, (int64_t[]){0, 4}, (int64_t[]){8, 4});
    ts_piece p = {"param.W", TS_F32, sw, r, col, 0};
    CHECK_OK(ts_ckpt_sliced_read(m, &p, 1, 1));
    CHECK(col[5] == W[1 * 16 + 5]);
    ts_region_box(&p.region, &sw, (int64_t[]){0, 3}, (int64_t[]){8, 4}); /* needs rank 0's too */
    EXPECT_ERR(ts_ckpt_sliced_read(m, &p, 1, 1), TS_EIO, "rank00000.safetensors", "missing");
    for (int r = 0; r < 4; r++)
      if (r != 1) rename(aside[r], keep[r]);
    /* a flipped byte in rank 2's file: verify names it (SHA-256), the load of its piece names it
     * (CRC-32 of the chunk), a load of rank 1's piece alone still works */
    char r2[700];
    snprintf(r2, sizeof r2, "%s/rank00002.safetensors", dir);
    copy_file(r2, r2c);
    flip(r2, -3);
    EXPECT_ERR(ts_ckpt_verify(dir, NULL, 0), TS_EFORMAT, "rank00002.safetensors", "SHA-256");
    EXPECT_ERR(load_and_check(dir, 0), TS_EFORMAT, "rank00002.safetensors", "CRC-32");
    ts_region_box(&p.region, &sw, (int64_t[]){0, 4}, (int64_t[]){8, 4});
    CHECK_OK(ts_ckpt_sliced_read(m, &p, 1, 1));
    copy_file(r2c, r2);
    CHECK_OK(ts_ckpt_verify(dir, NULL, 0));
    /* a truncated one */
    CHECK(truncate(r2, 100) == 0);
    EXPECT_ERR(load_and_check(dir, 0), TS_EFORMAT, "rank00002.safetensors", "100 bytes");
    EXPECT_ERR(ts_ckpt_verify(dir, NULL, 0), TS_EFORMAT, "rank00002.safetensors", "100 bytes");
    copy_file(r2c, r2);
    /* a missing one */
    unlink(r2);
    EXPECT_ERR(load_and_check(dir, 0), TS_EIO, "rank00002.safetensors", "missing");
    EXPECT_ERR(ts_ckpt_verify(dir, NULL, 0), TS_EIO, "rank00002.safetensors");
    copy_file(r2c, r2);
    ts_ckpt_manifest_free(m);
  }
  /* a wrong hash in the manifest */
  char man[700], manc[700];
  snprintf(man, sizeof man, "%s/%s", dir, TS_CKPT_MANIFEST);
  snprintf(manc, sizeof manc, "%s/manifest.copy", g_dir);
  copy_file(man, manc);
  {
    size_t n = 0;
    char *txt = NULL;
    FILE *x = fopen(man, "rb");
    if (x) {
      fseek(x, 0, SEEK_END);
      n = (size_t)ftell(x);
      fseek(x, 0, SEEK_SET);
      txt = calloc(n + 1, 1);
      if (fread(txt, 1, n, x) != n) n = 0;
      fclose(x);
    }
    char *h = txt ? strstr(txt, "\"sha256\":") : NULL;
    if (h && (h = strchr(h + 9, '"'))) h[1] = h[1] == 'a' ? 'b' : 'a';
    FILE *y = fopen(man, "wb");
    if (y && txt) fwrite(txt, 1, n, y);
    if (y) fclose(y);
    free(txt);
  }
  EXPECT_ERR(ts_ckpt_verify(dir, NULL, 0), TS_EFORMAT, "rank00000.safetensors", "SHA-256");
  copy_file(manc, man);
  /* a missing manifest: not a checkpoint */
  unlink(man);
  EXPECT_ERR(load_and_check(dir, 0), TS_ENOTFOUND, "ckpt-00000042", "no manifest.json");
  EXPECT_ERR(ts_ckpt_verify(dir, NULL, 0), TS_ENOTFOUND, "no manifest.json");
  char latest[700];
  EXPECT_ERR(ts_ckpt_latest(g_dir, "ckpt", latest, sizeof latest), TS_ENOTFOUND, "ckpt");
  copy_file(manc, man);
  CHECK_OK(ts_ckpt_latest(g_dir, "ckpt", latest, sizeof latest));
  CHECK(!strcmp(latest, dir));
  /* a manifest missing writer 2's record: refused before it is written */
  char dir2[512];
  ts_ckpt_dir_path(dir2, sizeof dir2, g_dir, "bad", 1);
  EXPECT_ERR(save(dir2, 2), TS_EINVAL, "param.W", "no piece holds elements");
  CHECK(!ts_ckpt_is_sliced(dir2));
  /* saving the same step again replaces it (atomic exchange) */
  W[0] = 99;
  CHECK_OK(save(dir, -1));
  CHECK_OK(load_and_check(dir, 1));
  CHECK_OK(ts_ckpt_verify(dir, NULL, 0));
  /* series: latest, rotation, cleaning */
  char d1[512], d2[512], d3[512];
  ts_ckpt_dir_path(d1, sizeof d1, g_dir, "ckpt", 1);
  ts_ckpt_dir_path(d2, sizeof d2, g_dir, "ckpt", 2);
  CHECK_OK(save(d1, -1));
  CHECK(mkdir(d2, 0777) == 0); /* a deletion cut short: no manifest */
  snprintf(path, sizeof path, "%s/rank00000.safetensors", d2);
  copy_file(r2c, path);
  snprintf(d3, sizeof d3, "%s/ckpt-00000003.tmp.999999999", g_dir); /* a dead writer's staging */
  CHECK(mkdir(d3, 0777) == 0);
  snprintf(path, sizeof path, "%s/rank00001.safetensors.tmp.999999999.0", d3);
  copy_file(r2c, path);
  snprintf(path, sizeof path, "%s/ckpt-00000050.safetensors", g_dir);
  copy_file(r2c, path); /* a whole file (its content does not matter here) */
  CHECK_OK(ts_ckpt_latest(g_dir, "ckpt", latest, sizeof latest));
  CHECK(!strcmp(latest, path));
  unlink(path);
  CHECK_OK(ts_ckpt_latest(g_dir, "ckpt", latest, sizeof latest));
  CHECK(!strcmp(latest, dir));
  CHECK(ts_ckpt_clean_temps(g_dir, "ckpt") == 2);
  struct stat sb;
  CHECK(stat(d2, &sb) != 0 && stat(d3, &sb) != 0 && stat(d1, &sb) == 0);
  /* a foreign file keeps a directory from being removed */
  CHECK(mkdir(d2, 0777) == 0);
  snprintf(path, sizeof path, "%s/notes.txt", d2);
  copy_file(r2c, path);
  CHECK(ts_ckpt_clean_temps(g_dir, "ckpt") == 0 && stat(path, &sb) == 0);
  rm_rf(d2);
  CHECK(ts_ckpt_rotate(g_dir, "ckpt", 1) == 1);
  CHECK(stat(d1, &sb) != 0 && stat(dir, &sb) == 0);
  if (!getenv("TS_KEEP")) rm_rf(g_dir);
  return ts_test_finish("test_ckpt_sliced");
}
