/* Strategy text, validation, strategy sets and strategy files (include/tessera/strategy.h):
 * parse/print round trips and parse errors with their column, every validation error with its
 * code and message, set lookups (exact names and '*' rules), save -> load round trips, the
 * MindSpore right-counted tensor_map against a hand-written fixture, malformed / mistyped /
 * incomplete / truncated files, and atomic writes (no temporary left, old file kept). */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tessera/strategy.h"
#include "test_util.h"

#define FIX TS_FIXTURE_DIR "/strategy/"


static ts_op_strategy parse_ok(const char *t) {
  ts_op_strategy st;
  CHECK_OK(ts_op_strategy_parse(t, &st));
  return st;
}

static void test_parse_print(void) {
  char buf[256];
  ts_op_strategy st = parse_ok("((2,1),(1,4))");
  CHECK(st.ninputs == 2 && st.ndim[0] == 2 && st.ndim[1] == 2);
  CHECK(st.cuts[0][0] == 2 && st.cuts[0][1] == 1 && st.cuts[1][0] == 1 && st.cuts[1][1] == 4);
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((2,1),(1,4))") == 0);

  /* spaces, Python trailing commas, one-element tuples, inputs with no dims */
  st = parse_ok("  ( (4,) , ( 2 , 2 ,), ( ) , )  ");
  CHECK(st.ninputs == 3 && st.ndim[0] == 1 && st.cuts[0][0] == 4 && st.ndim[1] == 2 && st.ndim[2] == 0);
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((4,),(2,2),())") == 0);
  st = parse_ok("((8,),)");
  CHECK(st.ninputs == 1 && st.ndim[0] == 1 && st.cuts[0][0] == 8);
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((8,),)") == 0);
  st = parse_ok("()");
  CHECK(st.ninputs == 0);
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "()") == 0);

  /* print -> parse -> equal, over several shapes of strategies */
  const char *texts[] = {"((2,1),(1,4))", "((1,2,4,1),(1,1))", "((4,),)", "((),(2,))", "((16,1,1,1,1,1,1,1),)",
                         "((1,),(2,),(1,),(2,),(1,),(2,),(1,),(2,))"};
  for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
    ts_op_strategy a = parse_ok(texts[k]), b;
    ts_op_strategy_str(&a, buf, sizeof buf);
    CHECK_MSG(strcmp(buf, texts[k]) == 0, "%s printed as %s", texts[k], buf);
    CHECK_OK(ts_op_strategy_parse(buf, &b));
    CHECK(ts_op_strategy_equal(&a, &b));
  }
  ts_op_strategy a = parse_ok("((2,1),(1,4))"), b = parse_ok("((2,1),(1,2))"), c = parse_ok("((2,1),)");
  CHECK(!ts_op_strategy_equal(&a, &b));
  CHECK(!ts_op_strategy_equal(&a, &c));
  /* a cut of 0 is syntax, refused by validation */
  st = parse_ok("((0,1),)");
  CHECK(st.cuts[0][0] == 0);
  /* printing into a short buffer stays terminated */
  ts_op_strategy_str(&a, buf, 5);
  CHECK(strlen(buf) == 4 && strncmp(buf, "((2,", 4) == 0);

  /* errors name the column */
  EXPECT_ERR(ts_op_strategy_parse("((2,1),(1,4)", &st), TS_EINVAL, "column 13", "the end");
  EXPECT_ERR(ts_op_strategy_parse("((2,1),(1,x))", &st), TS_EINVAL, "column 11", "'x'", "a cut");
  EXPECT_ERR(ts_op_strategy_parse("(2,1)", &st), TS_EINVAL, "column 2", "'('");
  EXPECT_ERR(ts_op_strategy_parse("[(2,1)]", &st), TS_EINVAL, "column 1", "'['");
  EXPECT_ERR(ts_op_strategy_parse("((2 1),)", &st), TS_EINVAL, "column 5", "',' or ')'");
  EXPECT_ERR(ts_op_strategy_parse("((2,1))x", &st), TS_EINVAL, "column 8", "end of the strategy");
  EXPECT_ERR(ts_op_strategy_parse("((-2,1),)", &st), TS_EINVAL, "column 3", "'-'");
  EXPECT_ERR(ts_op_strategy_parse("", &st), TS_EINVAL, "column 1", "the end");
  EXPECT_ERR(ts_op_strategy_parse("((1,1,1,1,1,1,1,1,1),)", &st), TS_EINVAL, "column 19", "more than 8 dims");
  EXPECT_ERR(ts_op_strategy_parse("((1),(1),(1),(1),(1),(1),(1),(1),(1))", &st), TS_EINVAL, "column 34",
             "more than 8 inputs");
  EXPECT_ERR(ts_op_strategy_parse("((1234567890123456789,),)", &st), TS_EINVAL, "column 3", "too long");
  CHECK(st.ninputs == 0); /* zeroed before parsing */
  printf("parse/print: round trips of %zu strategies, Python tuple forms, 11 errors with columns\n",
         sizeof texts / sizeof *texts);
}

static void test_validate(void) {
  ts_op_strategy st = parse_ok("((2,1),(1,4))");
  CHECK_OK(ts_op_strategy_validate("fc1", &st, 8));
  CHECK_OK(ts_op_strategy_validate("fc1", &st, 4)); /* 2 | 4 and 4 | 4 */
  EXPECT_ERR(ts_op_strategy_validate("fc1", &st, 6), TS_EINVAL, "op fc1", "input 1", "product", " 4,",
             "device count 6");
  st = parse_ok("((2,0),)");
  EXPECT_ERR(ts_op_strategy_validate("fc2", &st, 8), TS_EINVAL, "op fc2", "input 0 dim 1", "cut 0", ">= 1");
  st = parse_ok("((2,2),(3,))");
  EXPECT_ERR(ts_op_strategy_validate("mm", &st, 8), TS_EINVAL, "op mm", "input 1", "(3)", "is 3",
             "device count 8");
  st = parse_ok("((4,4),)");
  EXPECT_ERR(ts_op_strategy_validate("mm", &st, 8), TS_EINVAL, "input 0", "(4,4)", "is 16", "device count 8");
  /* a huge product cannot overflow into a false "divides" */
  st = parse_ok("((65536,65536,65536,65536),)");
  EXPECT_ERR(ts_op_strategy_validate("big", &st, 8), TS_EINVAL, "op big", "input 0", "device count 8");
  st = parse_ok("((1,1),)");
  st.cuts[0][0] = -3;
  EXPECT_ERR(ts_op_strategy_validate("neg", &st, 8), TS_EINVAL, "op neg", "input 0 dim 0", "cut -3");
  st.ninputs = 9;
  EXPECT_ERR(ts_op_strategy_validate("many", &st, 8), TS_EINVAL, "op many", "9 inputs");
  st = parse_ok("((1,1),)");
  EXPECT_ERR(ts_op_strategy_validate("x", &st, 0), TS_EINVAL, "device count 0");

  /* shapes */
  st = parse_ok("((2,1),(1,4))");
  ts_shape ok2[2] = {ts_shape2(8, 6), ts_shape2(6, 16)};
  CHECK_OK(ts_op_strategy_check_shapes("fc1", &st, 2, ok2));
  ts_shape bad[2] = {ts_shape2(8, 6), ts_shape2(6, 10)};
  EXPECT_ERR(ts_op_strategy_check_shapes("fc1", &st, 2, bad), TS_ESHAPE, "op fc1", "input 1 dim 1", "size 10",
             "cut 4");
  ts_shape odd[2] = {ts_shape2(7, 6), ts_shape2(6, 16)};
  EXPECT_ERR(ts_op_strategy_check_shapes("fc1", &st, 2, odd), TS_ESHAPE, "input 0 dim 0", "size 7", "cut 2");
  ts_shape rank3[2] = {ts_shape3(8, 6, 2), ts_shape2(6, 16)};
  EXPECT_ERR(ts_op_strategy_check_shapes("fc1", &st, 2, rank3), TS_ESHAPE, "input 0", "2 dims", "has 3");
  EXPECT_ERR(ts_op_strategy_check_shapes("fc1", &st, 1, ok2), TS_ESHAPE, "2 inputs", "has 1");
  printf("validate: cuts >= 1, products dividing the device count, 4 shape errors\n");
}

static void test_set(void) {
  ts_strategy_set *s = NULL;
  EXPECT_ERR(ts_strategy_set_create(0, 0, &s), TS_EINVAL, "device_num 0");
  EXPECT_ERR(ts_strategy_set_create(8, -1, &s), TS_EINVAL, "stage -1");
  CHECK(s == NULL);
  CHECK_OK(ts_strategy_set_create(8, 1, &s));
  CHECK(ts_strategy_set_device_num(s) == 8 && ts_strategy_set_stage(s) == 1);
  CHECK_OK(ts_strategy_set_put_text(s, "blocks.0.mlp.fc1", "((2,1),(1,4))"));
  CHECK_OK(ts_strategy_set_put_text(s, "blocks.*.mlp.fc1", "((8,1),(1,1))"));
  CHECK_OK(ts_strategy_set_put_text(s, "blocks.*.*.fc1", "((1,1),(1,8))"));
  CHECK_OK(ts_strategy_set_put_text(s, "head", "((4,2),)"));
  CHECK(ts_strategy_set_count(s) == 4);
  CHECK(strcmp(ts_strategy_set_name(s, 1), "blocks.*.mlp.fc1") == 0);
  CHECK(ts_strategy_set_name(s, 4) == NULL && ts_strategy_set_at(s, -1) == NULL);
  char buf[128];
  ts_op_strategy st;
  /* exact beats rules */
  CHECK_OK(ts_strategy_set_get(s, "blocks.0.mlp.fc1", &st));
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((2,1),(1,4))") == 0);
  /* the rule with more literal characters wins over the wider one */
  CHECK_OK(ts_strategy_set_get(s, "blocks.11.mlp.fc1", &st));
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((8,1),(1,1))") == 0);
  CHECK_OK(ts_strategy_set_get(s, "blocks.3.attn.fc1", &st));
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((1,1),(1,8))") == 0);
  /* '*' does not cross a '.' and names must match to the end */
  EXPECT_ERR(ts_strategy_set_get(s, "blocks.0.x.mlp.fc1", &st), TS_ENOTFOUND, "blocks.0.x.mlp.fc1");
  EXPECT_ERR(ts_strategy_set_get(s, "blocks.1.mlp.fc12", &st), TS_ENOTFOUND, "no strategy");
  EXPECT_ERR(ts_strategy_set_get(s, "hea", &st), TS_ENOTFOUND, "op hea");
  /* replace keeps the count and the position */
  CHECK_OK(ts_strategy_set_put_text(s, "head", "((8,1),)"));
  CHECK(ts_strategy_set_count(s) == 4 && strcmp(ts_strategy_set_name(s, 3), "head") == 0);
  CHECK(ts_strategy_set_at(s, 3)->cuts[0][0] == 8);
  /* put validates and names the op; a text error is prefixed with the op */
  EXPECT_ERR(ts_strategy_set_put_text(s, "bad", "((3,1),)"), TS_EINVAL, "op bad", "device count 8");
  EXPECT_ERR(ts_strategy_set_put_text(s, "bad2", "((3,1)"), TS_EINVAL, "op bad2", "column 7");
  CHECK(ts_strategy_set_count(s) == 4);
  /* remove */
  CHECK_OK(ts_strategy_set_remove(s, "blocks.*.mlp.fc1"));
  CHECK_OK(ts_strategy_set_get(s, "blocks.11.mlp.fc1", &st));
  CHECK(st.cuts[1][1] == 8); /* the wider rule now */
  EXPECT_ERR(ts_strategy_set_remove(s, "blocks.*.mlp.fc1"), TS_ENOTFOUND, "blocks.*.mlp.fc1");
  CHECK(ts_strategy_set_count(s) == 3);

  /* layouts */
  ts_layout l, l2;
  ts_shape sh, sh2 = ts_shape2(8, 16);
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_strategy_set_put_layout(s, "blocks.0.mlp.fc1.weight", &l, &sh2));
  CHECK_OK(ts_strategy_set_get_layout(s, "blocks.0.mlp.fc1.weight", &l2, &sh));
  CHECK(ts_layout_equal(&l, &l2) && ts_shape_equal(&sh, &sh2));
  EXPECT_ERR(ts_strategy_set_get_layout(s, "nope", &l2, &sh), TS_ENOTFOUND, "parameter nope");
  ts_shape odd = ts_shape2(7, 16);
  EXPECT_ERR(ts_strategy_set_put_layout(s, "w_odd", &l, &odd), TS_ESHAPE, "parameter w_odd", "7");
  CHECK_OK(ts_layout_init(&l2, 1, (int[]){4}, 2, (int[]){0, -1}, 0));
  EXPECT_ERR(ts_strategy_set_put_layout(s, "w4", &l2, &sh2), TS_EINVAL, "parameter w4", "4 devices", "for 8");
  CHECK(ts_strategy_set_layout_count(s) == 1);
  const char *pn = NULL;
  CHECK_OK(ts_strategy_set_layout_at(s, 0, &pn, NULL, NULL));
  CHECK(pn && strcmp(pn, "blocks.0.mlp.fc1.weight") == 0);
  EXPECT_ERR(ts_strategy_set_layout_at(s, 1, &pn, NULL, NULL), TS_EINVAL, "entry 1");
  ts_strategy_set_free(s);
  ts_strategy_set_free(NULL);
  printf("set: exact names, '*' rules and their precedence, replace, remove, layouts and their errors\n");
}

static void test_shared(void) {
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_create(8, 0, &s));
  CHECK_OK(ts_strategy_set_put_text(s, "embed", "((1,4),(2,1))"));
  CHECK_OK(ts_strategy_set_put_text(s, "lm_head", "((2,1),(1,4))"));
  CHECK_OK(ts_strategy_set_put_text(s, "tied_ok", "((1,4),(8,))"));
  ts_param_use ok[] = {{"embed", 0, "wte"}, {"tied_ok", 0, "wte"}, {"embed", 1, "x"}, {"lm_head", 0, "y"}};
  CHECK_OK(ts_strategy_check_shared(s, 4, ok));
  ts_param_use bad[] = {{"embed", 0, "wte"}, {"lm_head", 1, "pos"}, {"lm_head", 0, "wte"}};
  EXPECT_ERR(ts_strategy_check_shared(s, 3, bad), TS_EINVAL, "parameter wte", "embed", "lm_head", "(1,4)",
             "(2,1)", "different strategies");
  ts_param_use missing[] = {{"embed", 0, "wte"}, {"ghost", 0, "wte"}};
  EXPECT_ERR(ts_strategy_check_shared(s, 2, missing), TS_ENOTFOUND, "parameter wte", "op ghost");
  ts_param_use badin[] = {{"embed", 2, "wte"}};
  EXPECT_ERR(ts_strategy_check_shared(s, 1, badin), TS_EINVAL, "op embed", "no input 2");
  ts_strategy_set_free(s);
  printf("shared parameters: consistent uses pass; conflicting, unknown op, bad input refused\n");
}

static int file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* Entries of dir other than . and .. whose name contains `sub`. */
static int count_entries(const char *dir, const char *sub) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, sub)) n++;
  closedir(d);
  return n;
}

static char *slurp(const char *p) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  char *b = calloc(1, 1 << 20);
  size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
  (void)n;
  fclose(f);
  return b;
}

static ts_strategy_set *sample_set(void) {
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_create(8, 2, &s));
  CHECK_OK(ts_strategy_set_put_text(s, "blocks.0.mlp.fc1", "((2,1),(1,4))"));
  CHECK_OK(ts_strategy_set_put_text(s, "blocks.*.attn.qkv", "((8,1,1),(1,1))"));
  CHECK_OK(ts_strategy_set_put_text(s, "scalar_op", "((),(8,))"));
  CHECK_OK(ts_strategy_set_put_text(s, "noinputs", "()"));
  ts_layout l;
  ts_shape sh = ts_shape2(8, 16);
  CHECK_OK(ts_layout_init(&l, 2, (int[]){2, 4}, 2, (int[]){0, -1}, 0));
  CHECK_OK(ts_strategy_set_put_layout(s, "w_rows", &l, &sh));
  CHECK_OK(ts_layout_init(&l, 3, (int[]){2, 2, 2}, 2, (int[]){2, -1}, 0x3u));
  CHECK_OK(ts_strategy_set_put_layout(s, "w_partial", &l, &sh));
  CHECK_OK(ts_layout_init(&l, 1, (int[]){8}, 0, NULL, 0));
  ts_shape sc = ts_shape_make(0, NULL);
  CHECK_OK(ts_strategy_set_put_layout(s, "scalar", &l, &sc));
  return s;
}

static void test_file_roundtrip(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/strat.json", dir);
  ts_strategy_set *s = sample_set(), *r = NULL, *e = NULL;
  CHECK_OK(ts_strategy_set_save(s, path));
  CHECK_OK(ts_strategy_set_load(path, 8, &r));
  CHECK(r && ts_strategy_set_equal(s, r));
  CHECK(r && ts_strategy_set_stage(r) == 2);
  /* equal really compares: an empty set and a changed cut differ */
  CHECK_OK(ts_strategy_set_create(8, 2, &e));
  CHECK(!ts_strategy_set_equal(s, e));
  if (r) {
    CHECK_OK(ts_strategy_set_put_text(r, "blocks.0.mlp.fc1", "((2,1),(1,2))"));
    CHECK(!ts_strategy_set_equal(s, r));
  }
  ts_strategy_set_free(r);
  r = NULL;
  /* device count 0 accepts the file's; a mismatch names both */
  CHECK_OK(ts_strategy_set_load(path, 0, &r));
  CHECK(r && ts_strategy_set_device_num(r) == 8);
  ts_strategy_set_free(r);
  r = NULL;
  EXPECT_ERR(ts_strategy_set_load(path, 4, &r), TS_ECONFIG, path, "device_num is 8", "4 devices");
  CHECK(r == NULL);
  /* the partial mask and the tensor map are written right-counted: dev (2,2,2), Tessera map
   * (2,-1) -> MindSpore (0,-1); partial axes {0,1} -> {1,2} */
  char *txt = slurp(path);
  cJSON *doc = txt ? cJSON_Parse(txt) : NULL;
  CHECK(doc != NULL);
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "layouts"), "w_partial");
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(w, "tensor_map");
  const cJSON *pa = cJSON_GetObjectItemCaseSensitive(w, "partial");
  CHECK(cJSON_GetArraySize(tm) == 2 && cJSON_GetArrayItem(tm, 0)->valueint == 0 &&
        cJSON_GetArrayItem(tm, 1)->valueint == -1);
  CHECK(cJSON_GetArraySize(pa) == 2 && cJSON_GetArrayItem(pa, 0)->valueint == 1 &&
        cJSON_GetArrayItem(pa, 1)->valueint == 2);
  const cJSON *fc1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "strategies"),
                                                      "blocks.0.mlp.fc1");
  const cJSON *in1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fc1, "inputs"), 1);
  CHECK(cJSON_GetArraySize(in1) == 2 && cJSON_GetArrayItem(in1, 1)->valueint == 4);
  CHECK(cJSON_GetObjectItemCaseSensitive(doc, "version")->valueint == 1);
  if (cJSON_GetArraySize(tm) == 2 && cJSON_GetArraySize(pa) == 2) printf("  w_partial (Tessera map (2,-1), partial {0,1}) written as tensor_map [%d,%d], partial [%d,%d]\n",
                       cJSON_GetArrayItem(tm, 0)->valueint, cJSON_GetArrayItem(tm, 1)->valueint,
                       cJSON_GetArrayItem(pa, 0)->valueint, cJSON_GetArrayItem(pa, 1)->valueint);
  cJSON_Delete(doc);
  free(txt);
  /* loaded set saved again gives the same bytes (deterministic output) */
  char path2[512];
  snprintf(path2, sizeof path2, "%s/strat2.json", dir);
  CHECK_OK(ts_strategy_set_load(path, 8, &r));
  CHECK_OK(ts_strategy_set_save(r, path2));
  char *a = slurp(path), *b = slurp(path2);
  CHECK(a && b && strcmp(a, b) == 0);
  free(a);
  free(b);
  ts_strategy_set_free(r);
  ts_strategy_set_free(e);
  ts_strategy_set_free(s);
  CHECK(count_entries(dir, ".tmp.") == 0);
  printf("file round trip: set -> save -> load equal, device_num mismatch, right-counted maps, stable bytes\n");
}

static void test_fixture_mindspore(void) {
  ts_strategy_set *s = NULL;
  CHECK_OK(ts_strategy_set_load(FIX "good_mindspore.json", 8, &s));
  if (!s) return;
  CHECK(ts_strategy_set_count(s) == 3 && ts_strategy_set_layout_count(s) == 3);
  ts_op_strategy st;
  char buf[128];
  CHECK_OK(ts_strategy_set_get(s, "blocks.5.attn.qkv", &st));
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((8,1),(1,1))") == 0);
  CHECK_OK(ts_strategy_set_get(s, "loss", &st));
  CHECK(strcmp(ts_op_strategy_str(&st, buf, sizeof buf), "((8,),(8,))") == 0);
  ts_layout l;
  ts_shape sh;
  /* MindSpore tensor_map [1,-1] on dev [2,4]: value 1 = axis 0 (the 2): rows cut in 2 */
  CHECK_OK(ts_strategy_set_get_layout(s, "w_rows", &l, &sh));
  CHECK(l.tmap[0] == 0 && l.tmap[1] == -1 && ts_layout_dim_cut(&l, 0) == 2 && ts_layout_dim_cut(&l, 1) == 1);
  CHECK(sh.ndim == 2 && sh.dims[0] == 8 && sh.dims[1] == 16);
  /* [-1,0]: value 0 = the last axis (the 4): columns cut in 4 */
  CHECK_OK(ts_strategy_set_get_layout(s, "w_cols", &l, &sh));
  CHECK(l.tmap[0] == -1 && l.tmap[1] == 1 && ts_layout_dim_cut(&l, 1) == 4);
  ts_shape local;
  CHECK_OK(ts_layout_local_shape(&l, &sh, &local));
  CHECK(local.dims[0] == 8 && local.dims[1] == 4);
  /* partial [1] (right-counted) = Tessera axis 0 */
  CHECK_OK(ts_strategy_set_get_layout(s, "w_partial", &l, &sh));
  CHECK(l.partial == 1u && l.tmap[1] == 1);
  ts_strategy_set_free(s);
  printf("fixture good_mindspore.json: right-counted tensor_map [1,-1] -> rows/2, [-1,0] -> cols/4, partial\n");
}

static void test_bad_files(const char *dir) {
  struct {
    const char *file;
    int code;
    const char *m1, *m2, *m3;
  } cases[] = {
      {"bad_truncated.json", TS_EFORMAT, "malformed JSON", "line 1", "ends too early"},
      {"bad_empty.json", TS_EFORMAT, "malformed JSON", "line 1", "ends too early"},
      {"bad_syntax.json", TS_EFORMAT, "malformed JSON", "line 2", "column"},
      {"bad_trailing.json", TS_EFORMAT, "unexpected text", "after the JSON", "byte"},
      {"bad_cut_negative.json", TS_EFORMAT, "strategies.fc1.inputs[1][0]", "expected a positive integer", "got -1"},
      {"bad_cut_string.json", TS_EFORMAT, "strategies.fc1.inputs[1][0]", "positive integer", "the string \"4\""},
      {"bad_cut_fraction.json", TS_EFORMAT, "strategies.fc1.inputs[0][1]", "positive integer", "got 1.5"},
      {"bad_unknown_key.json", TS_EFORMAT, "strategies.fc1.input", "unknown key", "fc1"},
      {"bad_missing_inputs.json", TS_EFORMAT, "strategies.fc1", "missing key", "\"inputs\""},
      {"bad_missing_device_num.json", TS_EFORMAT, "missing key", "\"device_num\"", "bad_missing_device_num"},
      {"bad_not_divisor.json", TS_EINVAL, "strategies.fc1", "is 3", "device count 8"},
      {"bad_inputs_type.json", TS_EFORMAT, "strategies.fc1.inputs", "expected an array", "got 4"},
      {"bad_version.json", TS_EUNSUPPORTED, "version 2", "version 1", "bad_version"},
      {"bad_top_array.json", TS_EFORMAT, "JSON object at the top", "an array", "bad_top_array"},
      {"bad_tmap_range.json", TS_EFORMAT, "layouts.w.tensor_map[0]", "counted from the right", "got 2"},
      {"bad_layout_shape.json", TS_ESHAPE, "layouts.w", "6", "bad_layout_shape"},
      {"bad_layout_no_shape.json", TS_EFORMAT, "layouts.w", "missing key", "\"shape\""},
      {"bad_layout_devices.json", TS_EINVAL, "layouts.w", "4 devices", "for 8"},
      {"bad_duplicate_op.json", TS_EFORMAT, "strategies.fc1", "duplicate op", "bad_duplicate_op"},
      {"does_not_exist.json", TS_ENOTFOUND, "does_not_exist.json", "cannot open", "No such file"},
  };
  int n = (int)(sizeof cases / sizeof *cases);
  for (int k = 0; k < n; k++) {
    char p[512];
    snprintf(p, sizeof p, FIX "%s", cases[k].file);
    ts_strategy_set *s = (ts_strategy_set *)&cases; /* must be reset to NULL */
    int rc = ts_strategy_set_load(p, 8, &s);
    ts_test_expect_err(__FILE__, __LINE__, rc, cases[k].code, (const char *const[]){cases[k].m1, cases[k].m2, cases[k].m3, NULL});
    CHECK_MSG(s == NULL, "%s: out not NULL on failure", cases[k].file);
    if (rc == cases[k].code) printf("  %-28s -> %s\n", cases[k].file, ts_last_error());
  }
  /* every fixture byte-prefix of the good file is refused cleanly (truncation anywhere) */
  char *good = slurp(FIX "good_mindspore.json");
  CHECK(good != NULL);
  int refused = 0, total = 0;
  if (good) {
    size_t len = strlen(good);
    char p[512];
    snprintf(p, sizeof p, "%s/trunc.json", dir);
    for (size_t cut = 0; cut + 1 < len; cut += 7) {
      /* a prefix that ends after the final '}' is complete; stop before the last brace */
      FILE *f = fopen(p, "wb");
      if (!f) break;
      fwrite(good, 1, cut, f);
      fclose(f);
      ts_strategy_set *s = NULL;
      int rc = ts_strategy_set_load(p, 8, &s);
      total++;
      refused += rc == TS_EFORMAT && s == NULL;
      ts_strategy_set_free(s);
    }
    free(good);
    unlink(p);
  }
  CHECK_MSG(total > 10 && refused == total, "%d of %d truncations refused", refused, total);
  printf("bad files: %d fixtures with code and message; %d/%d truncated copies refused\n", n, refused, total);
}

static void test_atomic(const char *dir) {
  ts_strategy_set *s = sample_set();
  char path[600], sub[512];
  /* a directory that does not exist: clean failure, nothing created */
  snprintf(sub, sizeof sub, "%s/no_such_dir", dir);
  snprintf(path, sizeof path, "%s/strat.json", sub);
  EXPECT_ERR(ts_strategy_set_save(s, path), TS_EIO, path, "temporary");
  CHECK(!file_exists(sub));
  CHECK(count_entries(dir, ".tmp.") == 0);

  /* overwriting: a failing write keeps the old file. Simulated with a file size limit (works as
   * root too): writes past it fail with EFBIG. */
  snprintf(path, sizeof path, "%s/keep.json", dir);
  FILE *f = fopen(path, "wb");
  const char *old = "{\"old\": true}\n";
  if (f) {
    fputs(old, f);
    fclose(f);
  }
  struct rlimit save_lim, lim;
  CHECK(getrlimit(RLIMIT_FSIZE, &save_lim) == 0);
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  lim = save_lim;
  lim.rlim_cur = 64; /* smaller than the sample set's JSON */
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  int rc = ts_strategy_set_save(s, path);
  CHECK(setrlimit(RLIMIT_FSIZE, &save_lim) == 0);
  signal(SIGXFSZ, prev);
  EXPECT_ERR(rc, TS_EIO, path, "write failed");
  char *now = slurp(path);
  CHECK(now && strcmp(now, old) == 0);
  free(now);
  CHECK(count_entries(dir, ".tmp.") == 0);
  printf("atomic: missing directory fails with no temporary; EFBIG mid-write keeps the old file\n");

  /* a read-only directory: only meaningful when not root (root writes anyway) */
  if (geteuid() == 0) {
    printf("  note: running as root, read-only directory case skipped\n");
  } else {
    snprintf(sub, sizeof sub, "%s/ro", dir);
    CHECK(mkdir(sub, 0755) == 0);
    snprintf(path, sizeof path, "%s/keep.json", sub);
    f = fopen(path, "wb");
    if (f) {
      fputs(old, f);
      fclose(f);
    }
    CHECK(chmod(sub, 0555) == 0);
    EXPECT_ERR(ts_strategy_set_save(s, path), TS_EIO, path);
    now = slurp(path);
    CHECK(now && strcmp(now, old) == 0);
    free(now);
    CHECK(count_entries(sub, ".tmp.") == 0);
    chmod(sub, 0755);
    unlink(path);
    rmdir(sub);
    printf("  read-only directory: save refused, old file intact\n");
  }
  /* the successful overwrite replaces it */
  snprintf(path, sizeof path, "%s/keep.json", dir);
  CHECK_OK(ts_strategy_set_save(s, path));
  ts_strategy_set *r = NULL;
  CHECK_OK(ts_strategy_set_load(path, 8, &r));
  CHECK(r && ts_strategy_set_equal(s, r));
  ts_strategy_set_free(r);
  ts_strategy_set_free(s);
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  char dir[] = "/tmp/ts_strategy_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_parse_print();
  test_validate();
  test_set();
  test_shared();
  test_file_roundtrip(dir);
  test_fixture_mindspore();
  test_bad_files(dir);
  test_atomic(dir);
  rm_tree(dir);
  return ts_test_finish("test_strategy");
}
