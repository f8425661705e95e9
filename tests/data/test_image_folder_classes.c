/* Image folders across splits and samples named in errors (issue: adversarial testing):
 *  - the test split takes the training split's classes by name: fewer classes keep their
 *    training labels, a class the training split lacks is an error naming it and the folder;
 *  - num_classes of an image folder (model.num_classes 0 resolves to it);
 *  - sources name their samples (image path; file + record) and the pipeline's errors use the
 *    name: a sample of another shape, a batch that cannot be stacked, through subsets too;
 *  - a failing transform is named as written in the config (data.transforms[i] (name)). */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/config.h"
#include "tessera/data.h"
#include "test_util.h"

/* the trainer's data set-up (src/train/train_data.c) */
int ts__train_sources(const ts_config *cfg, ts_source **train, ts_source **test);

static char g_dir[256];

static int has(const char *needle) { return strstr(ts_last_error(), needle) != NULL; }

static void write_png(const char *path, int w, int h, int v) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = PNG_FORMAT_RGB;
  uint8_t *b = malloc((size_t)(w * h * 3));
  memset(b, v, (size_t)(w * h * 3));
  CHECK(png_image_write_to_file(&im, path, 0, b, 0, NULL) != 0);
  free(b);
}

/* root/<split>/<cls>/<name>.png of w x h */
static void img(const char *split, const char *cls, const char *name, int w, int h) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", g_dir, split);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s", g_dir, split, cls);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s/%s.png", g_dir, split, cls, name);
  write_png(p, w, h, 7);
}

static void test_classes_by_name(void) {
  img("train", "ant", "a0", 4, 4);
  img("train", "bee", "b0", 4, 4);
  img("train", "cat", "c0", 4, 4);
  img("test", "ant", "a1", 4, 4);
  img("test", "cat", "c1", 4, 4); /* no bee: fine, cat keeps label 2 */
  char root[600];
  snprintf(root, sizeof root, "%s/train", g_dir);
  ts_source *tr, *te;
  CHECK_OK(ts_source_image_folder(root, &tr));
  CHECK(ts_source_num_classes(tr) == 3);
  int nc;
  const char *const *names = ts_source_class_names(tr, &nc);
  CHECK(names && nc == 3 && !strcmp(names[2], "cat"));
  snprintf(root, sizeof root, "%s/test", g_dir);
  CHECK_OK(ts_source_image_folder_classes(root, names, nc, &te));
  CHECK(ts_source_len(te) == 2);
  CHECK(ts_source_label(te, 0) == 0 && ts_source_label(te, 1) == 2);
  CHECK(ts_source_num_classes(te) == 3);
  ts_source_free(te);
  /* a class the training split does not have */
  img("test", "dog", "d1", 4, 4);
  CHECK(ts_source_image_folder_classes(root, names, nc, &te) == TS_EFORMAT && !te);
  CHECK_MSG(has("/test: class 'dog' is not a class of the training split (3: ant, bee, cat)"), "%s",
            ts_last_error());
  CHECK(ts_source_class_names(NULL, &nc) == NULL && nc == 0);
  ts_source_free(tr);

  /* through the trainer's set-up: same answers, and model.num_classes 0 can resolve to 3 */
  ts_config cfg;
  char set_path[700];
  snprintf(set_path, sizeof set_path, "data.path=%s", g_dir);
  const char *ov[] = {"data.name=image_folder", set_path, "model.num_classes=0"};
  CHECK_OK(ts_config_load(NULL, ov, 3, &cfg));
  CHECK(ts__train_sources(&cfg, &tr, &te) != TS_OK);
  CHECK_MSG(has("class 'dog' is not a class of the training split"), "%s", ts_last_error());
  snprintf(root, sizeof root, "rm -rf %s/test/dog", g_dir);
  CHECK(system(root) == 0);
  CHECK_OK(ts__train_sources(&cfg, &tr, &te));
  CHECK(te && ts_source_len(te) == 2 && ts_source_label(te, 1) == 2 && ts_source_num_classes(tr) == 3);
  ts_source_free(tr);
  ts_source_free(te);
  /* no test split at all: fine (it is optional) */
  const char *ov2[] = {"data.name=image_folder", set_path, "data.test_split=nope"};
  CHECK_OK(ts_config_load(NULL, ov2, 3, &cfg));
  CHECK_OK(ts__train_sources(&cfg, &tr, &te));
  CHECK(tr && !te);
  ts_source_free(tr);
}

static void test_sample_names(void) {
  img("named", "ant", "a0", 4, 4);
  img("named", "ant", "a1", 4, 4);
  img("named", "bee", "b0", 6, 5); /* another size */
  char root[600], want[2048], buf[700];
  snprintf(root, sizeof root, "%s/named", g_dir);
  ts_source *s;
  CHECK_OK(ts_source_image_folder(root, &s));
  CHECK(ts_source_sample_name(s, 2, buf, sizeof buf) == 1);
  snprintf(want, sizeof want, "%s/bee/b0.png", root);
  CHECK_MSG(!strcmp(buf, want), "%s", buf);
  CHECK(ts_source_sample_name(s, 3, buf, sizeof buf) == 0 && !buf[0]); /* out of range */

  /* the sample of another shape, against the shape the model was built for */
  ts_pipeline_config pc = ts_pipeline_config_default();
  pc.source = s;
  pc.batch_size = 3;
  pc.epochs = 1;
  pc.expect_shape = ts_shape3(4, 4, 3);
  pc.expect_dtype = TS_U8;
  pc.name = "test split";
  ts_pipeline *p;
  ts_batch b;
  CHECK_OK(ts_pipeline_create(&pc, &p));
  CHECK(ts_pipeline_next(p, &b) == TS_ESHAPE);
  snprintf(want, sizeof want, "test split: sample 2 (%s/bee/b0.png) (batch 0 of epoch 0) is (5,6,3) u8", root);
  CHECK_MSG(has(want), "%s", ts_last_error());
  ts_pipeline_free(p);
  /* no expected shape: the batch cannot be stacked */
  pc.expect_shape.ndim = 0;
  CHECK_OK(ts_pipeline_create(&pc, &p));
  CHECK(ts_pipeline_next(p, &b) == TS_ESHAPE);
  snprintf(want, sizeof want, "cannot stack: sample 2 (%s/bee/b0.png) (position 2) has data (5,6,3)", root);
  CHECK_MSG(has(want) && has("test split: ") && has("a0.png) (position 0)"), "%s", ts_last_error());
  ts_pipeline_free(p);
  /* a transform that fails, named where the config wrote it */
  ts_config cfg;
  const char *ov[] = {"data.name=image_folder", "data.path=/x",
                      "data.transforms=[{name: hflip, p: 0.5}, {name: random_crop, size: 5, padding: 0}]"};
  CHECK_OK(ts_config_load(NULL, ov, 3, &cfg));
  ts_transform tf[8];
  int ntf = ts_config_transforms(&cfg, 1, tf, 8);
  CHECK(ntf == 2);
  pc.transforms = tf;
  pc.ntransforms = ntf;
  CHECK_OK(ts_pipeline_create(&pc, &p));
  CHECK(ts_pipeline_next(p, &b) != TS_OK);
  snprintf(want, sizeof want, "test split: sample 0 (%s/ant/a0.png) (epoch 0, batch 0, position 0): "
           "data.transforms[1] (random_crop) on a (4,4,3) u8 sample: crop (5,5) is larger", root);
  CHECK_MSG(has(want), "%s", ts_last_error());
  ts_pipeline_free(p);
  ts_source_free(s);

  /* a subset (data.train_limit) forwards the names */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s/train %s/test && mv %s/named %s/train", g_dir, g_dir, g_dir, g_dir);
  CHECK(system(cmd) == 0);
  char set_path[700];
  snprintf(set_path, sizeof set_path, "data.path=%s", g_dir);
  const char *ov2[] = {"data.name=image_folder", set_path, "data.train_limit=2"};
  CHECK_OK(ts_config_load(NULL, ov2, 3, &cfg));
  ts_source *tr, *te;
  CHECK_OK(ts__train_sources(&cfg, &tr, &te));
  CHECK(ts_source_len(tr) == 2 && ts_source_sample_name(tr, 1, buf, sizeof buf) == 1);
  CHECK_MSG(strstr(buf, "/train/ant/a1.png") != NULL, "%s", buf);
  ts_source_free(tr);
  ts_source_free(te);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_ifc_XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  test_classes_by_name();
  test_sample_names();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  CHECK(system(cmd) == 0);
  return ts_test_finish("test_image_folder_classes");
}
