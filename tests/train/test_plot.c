/* `tessera plot`'s figure (src/train/plot.c): the step axis ends at the data (a 2,340-step run
 * is drawn to 2,340, not 3,000), log axes, the learning-rate panel, the size option and the log
 * scale's non-positive values; one figure read back from its PNG (libpng). */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/base.h"
#include "tessera/config.h"
#include "tessera/plot.h"
#include "train/plot_impl.h"
#include "test_util.h"

static char g_dir[64];
static char g_log[2048];

static void capture(ts_log_level level, const char *msg, void *user) {
  (void)user;
  if (level >= TS_LOG_WARN) snprintf(g_log + strlen(g_log), sizeof g_log - strlen(g_log), "%s\n", msg);
}

static int labels_distinct(const ts__plot_axis *a) {
  for (int i = 0; i < a->nticks; i++)
    for (int j = i + 1; j < a->nticks; j++)
      if (!strcmp(a->label[i], a->label[j])) return 0;
  return a->nticks >= 2;
}

/* The step axis: ends at the last step or a tick at most 5% of the span beyond; ticks inside. */
static void test_step_axis(void) {
  ts__plot_axis a;
  ts__plot_make_axis(1, 2340, 1, 0, &a);
  CHECK_MSG(a.hi >= 2340 && a.hi <= 2400, "1..2340 drawn to %g", a.hi);
  CHECK_MSG(a.lo == 0, "1..2340 from %g", a.lo);
  CHECK_MSG(a.tick[a.nticks - 1] <= a.hi && a.nticks >= 4, "%d ticks, last %s", a.nticks, a.label[a.nticks - 1]);
  const double ends[] = {3, 7, 19, 100, 468, 500, 999, 1001, 2340, 2501, 3001, 4690, 9999, 12345, 1000003, 2.7e10};
  const double starts[] = {0, 1, 1000};
  for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++)
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
      double v0 = starts[s], v1 = ends[i];
      if (v1 <= v0) continue;
      ts__plot_make_axis(v0, v1, 1, 0, &a);
      double span = v1 - v0, last = a.tick[a.nticks - 1];
      CHECK_MSG(a.lo <= v0 && a.lo >= v0 - 0.05 * span - 1e-9 && a.hi >= v1 && a.hi <= v1 + 0.05 * span + 1e-9,
                "[%g, %g] drawn over [%g, %g]", v0, v1, a.lo, a.hi);
      CHECK_MSG(labels_distinct(&a) && a.nticks <= 8 && a.tick[0] >= a.lo && last <= a.hi,
                "[%g, %g]: %d ticks %s..%s", v0, v1, a.nticks, a.label[0], a.label[a.nticks - 1]);
      CHECK_MSG(last <= v1 * 1.05 + 1e-9, "[%g, %g]: the last label %s beyond the data", v0, v1, a.label[a.nticks - 1]);
    }
}

static void test_value_axes(void) {
  ts__plot_axis a;
  /* a learning rate: values >= 0 keep the axis >= 0; small ones get an exponent */
  ts__plot_make_axis(0, 3e-4, 0, 0, &a);
  CHECK_MSG(a.lo == 0 && a.hi >= 3e-4 && labels_distinct(&a), "%g..%g", a.lo, a.hi);
  CHECK_MSG(strstr(a.label[a.nticks - 1], "e-4") != NULL, "label %s", a.label[a.nticks - 1]);
  ts__plot_make_axis(0, 0.1, 0, 0, &a);
  CHECK_MSG(a.lo == 0 && !strchr(a.label[1], 'e'), "%g, %s", a.lo, a.label[1]);
  /* log axes: 1-2-5 ticks within a few decades, decades beyond */
  ts__plot_make_log_axis(0.3, 2.3, &a);
  CHECK_MSG(a.lo == 0.2 && a.hi == 5 && a.nticks == 5 && labels_distinct(&a), "%g..%g, %d ticks", a.lo, a.hi, a.nticks);
  ts__plot_make_log_axis(3e-6, 0.1, &a);
  CHECK_MSG(a.lo <= 3e-6 && a.hi >= 0.1 && labels_distinct(&a) && a.nticks <= TS_PLOT_MAX_TICKS, "%g..%g", a.lo, a.hi);
  CHECK_MSG(!strcmp(a.label[0], "1e-6") && !strcmp(a.label[a.nticks - 1], "0.1"), "%s..%s", a.label[0],
            a.label[a.nticks - 1]);
  ts__plot_make_log_axis(1e-30, 1e30, &a);
  CHECK_MSG(a.lo <= 1e-30 && a.hi >= 1e30 && labels_distinct(&a), "%g..%g", a.lo, a.hi);
  for (int i = 1; i < a.nticks; i++) CHECK(a.tick[i] > a.tick[i - 1]);
  ts__plot_make_log_axis(0.5, 0.5, &a);
  CHECK_MSG(a.lo < 0.5 && a.hi > 0.5 && labels_distinct(&a), "%g..%g", a.lo, a.hi);
  ts__plot_make_log_axis(-1, 0, &a); /* nothing positive */
  CHECK(a.lo == 1 && a.hi == 10);
}

/* A 2,340-step run: a loss falling, a warm-up then cosine learning rate, evals every 468 steps. */
static void write_run(const char *path, int with_lr, int nonpositive) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "{\"type\":\"run\",\"title\":\"r (r.yaml): resnet20 on fashion_mnist\"}\n");
  for (int s = 1; s <= 2340; s += (s == 1 ? 9 : 10)) {
    double lr = 0.1 * fmin(1, s / 200.0) * 0.5 * (1 + cos(M_PI * s / 2340));
    double loss = nonpositive && s == 1000 ? 0 : nonpositive && s == 1010 ? -1 : 2.3 * exp(-s / 600.0) + 0.2;
    fprintf(f, "{\"type\":\"step\",\"step\":%d,\"epoch\":%d,\"loss\":%.6g", s, 1 + s / 468, loss);
    if (with_lr) fprintf(f, ",\"lr\":%.6g", lr);
    fprintf(f, "}\n");
    if (s % 470 == 0 || s == 2340) /* evaluations (steps on the 10-step grid) */
      fprintf(f, "{\"type\":\"eval\",\"step\":%d,\"loss\":%.4f,\"top1\":%.4f}\n", s, 2 * exp(-s / 600.0) + 0.3,
              0.9 - 0.5 * exp(-s / 500.0));
  }
  fclose(f);
}

/* Reads a PNG back as RGB; NULL on failure. */
static unsigned char *read_png(const char *path, int *w, int *h) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path)) return NULL;
  im.format = PNG_FORMAT_RGB;
  unsigned char *px = malloc(PNG_IMAGE_SIZE(im));
  if (!px || !png_image_finish_read(&im, NULL, px, 0, NULL)) {
    free(px);
    png_image_free(&im);
    return NULL;
  }
  *w = (int)im.width;
  *h = (int)im.height;
  return px;
}

/* pixels of colour (r,g,b) in a rectangle, and the rightmost one's x */
static int count(const unsigned char *px, int w, int x0, int y0, int x1, int y1, int r, int g, int b, int *xmax) {
  int n = 0;
  if (xmax) *xmax = -1;
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) {
      const unsigned char *q = px + 3 * ((size_t)y * w + x);
      if (q[0] == r && q[1] == g && q[2] == b) {
        n++;
        if (xmax && x > *xmax) *xmax = x;
      }
    }
  return n;
}

static const int k_lr[3] = {TS_PLOT_LR_RGB};

static void test_figure(void) {
  char m[128], png[128];
  snprintf(m, sizeof m, "%s/m.jsonl", g_dir);
  snprintf(png, sizeof png, "%s/c.png", g_dir);
  write_run(m, 1, 0);
  CHECK_OK(ts_plot_metrics(m, png));
  int w = 0, h = 0, xmax;
  unsigned char *px = read_png(png, &w, &h);
  CHECK_MSG(px && w == TS_PLOT_W && h == TS_PLOT_H, "%dx%d", w, h);
  if (px) {
    ts__plot_rect r0, r2;
    ts__plot_panel_rect(w, h, 3, 0, &r0);
    ts__plot_panel_rect(w, h, 3, 2, &r2);
    /* the training loss reaches the right end of its panel (at 2,340 of 3,000 it stopped at 78%) */
    int n = count(px, w, r0.x, r0.y, r0.x + r0.w + 3, r0.y + r0.h, 31, 119, 180, &xmax);
    CHECK_MSG(n > 100 && xmax >= r0.x + r0.w - 3, "loss: %d pixels, rightmost at %d of %d..%d", n, xmax, r0.x,
              r0.x + r0.w);
    /* the learning-rate curve: in the third panel, reaching its right end, and nowhere else */
    n = count(px, w, r2.x, r2.y - 4, r2.x + r2.w + 4, r2.y + r2.h + 4, k_lr[0], k_lr[1], k_lr[2], &xmax);
    int all = count(px, w, 0, 0, w, h, k_lr[0], k_lr[1], k_lr[2], NULL);
    CHECK_MSG(n > 100 && n == all && xmax >= r2.x + r2.w - 3, "lr: %d pixels in its panel of %d, rightmost at %d", n,
              all, xmax);
    free(px);
  }

  /* a size asked for */
  ts_plot_options o = {0};
  CHECK_OK(ts_plot_parse_size("1600x600", "--size", &o.width, &o.height));
  CHECK_OK(ts_plot_metrics_with(m, png, &o));
  px = read_png(png, &w, &h);
  CHECK_MSG(px && w == 1600 && h == 600, "%dx%d", w, h);
  free(px);

  /* a file from before lr was logged: two panels, no lr colour */
  write_run(m, 0, 0);
  CHECK_OK(ts_plot_metrics(m, png));
  px = read_png(png, &w, &h);
  CHECK(px && count(px, w, 0, 0, w, h, k_lr[0], k_lr[1], k_lr[2], NULL) == 0);
  free(px);

  /* log scales: a loss of 0 and one of -1 are left out with one warning naming the file */
  write_run(m, 1, 1);
  o.log_loss = o.log_lr = 1;
  g_log[0] = 0;
  ts_log_set_hook(capture, NULL);
  CHECK_OK(ts_plot_metrics_with(m, png, &o));
  ts_log_set_hook(NULL, NULL);
  CHECK_MSG(strstr(g_log, "m.jsonl: log scale: 2 loss values <= 0 not drawn") != NULL, "log: %s", g_log);
  px = read_png(png, &w, &h);
  CHECK(px && w == 1600 && count(px, w, 0, 0, w, h, 31, 119, 180, NULL) > 100);
  free(px);
  /* a size out of range through the library: an error, no file */
  o.width = 100000;
  unlink(png);
  CHECK(ts_plot_metrics_with(m, png, &o) == TS_EINVAL && access(png, F_OK) != 0);
}

static void test_parse_size(void) {
  int w = 0, h = 0;
  CHECK_OK(ts_plot_parse_size("640x360", "--size", &w, &h));
  CHECK(w == 640 && h == 360);
  CHECK_OK(ts_plot_parse_size("4096X4096", "--size", &w, &h));
  const char *bad[] = {"", "x", "640", "640x", "x360", "12x12", "640x360x", " 640x360", "640x 360", "-640x360",
                       "640x-360", "99999x360", "640.5x360", "axb", "640x360 "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = ts_plot_parse_size(bad[i], "log.plot_size", &w, &h);
    CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "log.plot_size") && strstr(ts_last_error(), "WIDTHxHEIGHT"),
              "'%s': rc %d: %s", bad[i], rc, ts_last_error());
  }
}

/* log.plot_size: checked when the config is, naming the key */
static void test_config_key(void) {
  ts_config c;
  ts_config_defaults(&c);
  CHECK_OK(ts_config_set(&c, "log.plot_size", "1600x600"));
  CHECK_OK(ts_config_validate(&c));
  CHECK(!strcmp(c.log.plot_size, "1600x600"));
  CHECK_OK(ts_config_set(&c, "log.plot_size", "1600"));
  CHECK_MSG(ts_config_validate(&c) != TS_OK && strstr(ts_last_error(), "log.plot_size '1600'"), "%s", ts_last_error());
  ts_config_free(&c);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_plot_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  test_step_axis();
  test_value_axes();
  test_parse_size();
  test_figure();
  test_config_key();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd)) {}
  return ts_test_finish("test_plot");
}
