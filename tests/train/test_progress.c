/* The metrics file, the progress bar and the TensorBoard event file of the trainer's progress
 * (src/train/progress.c, tensorboard.c):
 * - a diverging run's NaN/inf values are written as null with a "nonfinite" list, every line
 *   parses as JSON, and `tessera plot`'s reader draws the file;
 * - the bar's line fits the terminal width it is given (20..400 columns) and keeps the eta;
 * - the event file is read back here in C: TFRecord framing with both masked CRC32Cs checked
 *   (CRC32C against its published check value), the Event protobufs decoded field by field and
 *   the scalars compared with what was written. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "tessera/config.h"
#include "tessera/plot.h"
#include "train/plot_impl.h"
#include "train/train_impl.h"

static char g_dir[256];

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long L = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)L + 1);
  if (b && fread(b, 1, (size_t)L, f) != (size_t)L) { free(b); b = NULL; }
  fclose(f);
  if (b) b[L] = 0;
  *n = (size_t)L;
  return b;
}

static void test_metrics_nonfinite(void) {
  ts_config cfg;
  ts_config_defaults(&cfg);
  char path[512], png[512];
  snprintf(path, sizeof path, "%s/sub/m.jsonl", g_dir);
  snprintf(png, sizeof png, "%s/m.png", g_dir);
  snprintf(cfg.log.metrics, sizeof cfg.log.metrics, "%s", path);
  cfg.log.progress = TS_PROGRESS_OFF;
  cfg.train.log_every = 1;
  ts__progress p;
  CHECK_OK(ts__progress_open(&p, &cfg, 3, 3, 0));
  ts_step_info s;
  memset(&s, 0, sizeof s);
  s.step = 1; s.loss = 2.5; s.lr = 0.1; s.grad_norm = 1; s.loss_scale = 1;
  CHECK_OK(ts__progress_step(&p, &s));
  s.step = 2; s.loss = NAN; s.grad_norm = INFINITY;
  CHECK_OK(ts__progress_step(&p, &s));
  s.step = 3; s.loss = -NAN; s.grad_norm = -INFINITY;
  CHECK_OK(ts__progress_step(&p, &s));
  ts_eval_info e = {.step = 3, .epoch = 0, .samples = 8, .loss = NAN, .top1 = 0.25, .top5 = 0.5, .seconds = 0.1};
  CHECK_OK(ts__progress_eval(&p, &e));
  CHECK_OK(ts__progress_end(&p, 3, NAN, 0.25, 1, "\"param_bytes\":4840,\"x\":{\"ranks\":2},", 3, 3));
  ts__progress_close(&p);

  size_t n;
  char *text = slurp(path, &n);
  CHECK_MSG(text != NULL, "%s not written (parent folder not created?)", path);
  if (!text) return;
  int lines = 0, nulls_ok = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    lines++;
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j != NULL, "line %d is not JSON: %s", lines, line);
    if (!j) continue;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *nf = cJSON_GetObjectItemCaseSensitive(j, "nonfinite");
    if (lines == 1) {
      CHECK_MSG(!strcmp(type->valuestring, "run") && cJSON_IsString(cJSON_GetObjectItem(j, "title")) &&
                    strstr(cJSON_GetObjectItem(j, "title")->valuestring, "mlp on fashion_mnist, momentum lr 0.05, batch 128"),
                "%s", line);
      cJSON_Delete(j);
      continue;
    }
    if (lines == 2) CHECK_MSG(nf == NULL && cJSON_IsNumber(cJSON_GetObjectItem(j, "loss")), "%s", line);
    if (lines == 3 || lines == 4) {
      CHECK_MSG(cJSON_IsNull(cJSON_GetObjectItem(j, "loss")) && cJSON_IsNull(cJSON_GetObjectItem(j, "grad_norm")),
                "%s", line);
      CHECK_MSG(cJSON_IsArray(nf) && cJSON_GetArraySize(nf) == 2 &&
                    !strcmp(cJSON_GetArrayItem(nf, 0)->valuestring, "loss") &&
                    !strcmp(cJSON_GetArrayItem(nf, 1)->valuestring, "grad_norm"),
                "%s", line);
      nulls_ok++;
    }
    if (lines == 5) {
      CHECK(!strcmp(type->valuestring, "eval"));
      CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "loss")) && cJSON_GetObjectItem(j, "top1")->valuedouble == 0.25);
      CHECK(cJSON_IsArray(nf) && cJSON_GetArraySize(nf) == 1);
    }
    if (lines == 6) {
      CHECK(!strcmp(type->valuestring, "end"));
      CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "final_loss")));
      CHECK(cJSON_GetObjectItem(j, "param_bytes") && cJSON_GetObjectItem(j, "param_bytes")->valuedouble == 4840);
      CHECK(cJSON_IsObject(cJSON_GetObjectItem(j, "x")));
      CHECK(cJSON_GetObjectItem(j, "wall_s") != NULL && cJSON_GetObjectItem(j, "_") == NULL);
    }
    cJSON_Delete(j);
  }
  CHECK_MSG(lines == 6 && nulls_ok == 2, "%d lines", lines);
  free(text);
  /* the plotter draws a file with nulls (a gap where the loss is not finite) */
  CHECK_OK(ts_plot_metrics(path, png));
  CHECK(access(png, F_OK) == 0);
}

static void test_bar_width(void) {
  char line[512];
  for (int cols = 20; cols <= 400; cols += 7) {
    ts__progress_bar_line(line, sizeof line, cols, 1, 10, 0.5, 117, 235, 2.345678, 12345, "01:23");
    CHECK_MSG((int)strlen(line) <= cols - 1, "%d columns: %zu chars: %s", cols, strlen(line), line);
    if (cols >= 50) CHECK_MSG(strstr(line, "eta 01:23") != NULL, "%d columns: eta missing: %s", cols, line);
    if (cols >= 80) CHECK_MSG(strstr(line, "samples/s") && strchr(line, '['), "%d columns: %s", cols, line);
  }
  ts__progress_bar_line(line, sizeof line, 200, 1, 10, 0.5, 117, 235, 2.345678, 12345, "01:23");
  CHECK_MSG(strstr(line, "[===============>              ]") != NULL, "full bar: %s", line);
  /* the width comes from $COLUMNS when stdout is not a terminal */
  setenv("COLUMNS", "57", 1);
  if (!isatty(STDOUT_FILENO)) CHECK(ts__terminal_columns(STDOUT_FILENO) == 57);
  setenv("COLUMNS", "junk", 1);
  if (!isatty(STDOUT_FILENO)) CHECK(ts__terminal_columns(STDOUT_FILENO) == 80);
  unsetenv("COLUMNS");
}

/* protobuf reading, enough for Event / Summary / Value */
static int rd_varint(const unsigned char *b, size_t n, size_t *k, uint64_t *v) {
  *v = 0;
  for (int sh = 0; sh < 64 && *k < n; sh += 7) {
    unsigned char c = b[(*k)++];
    *v |= (uint64_t)(c & 0x7F) << sh;
    if (!(c & 0x80)) return 1;
  }
  return 0;
}
typedef struct { double wall; int64_t step; char tag[64]; float value; int has_value; char version[32]; } event;
static int decode_value(const unsigned char *b, size_t n, event *ev) {
  size_t k = 0;
  while (k < n) {
    uint64_t key, len;
    if (!rd_varint(b, n, &k, &key)) return 0;
    if ((key & 7) == 2) {
      if (!rd_varint(b, n, &k, &len) || k + len > n) return 0;
      if ((key >> 3) == 1) snprintf(ev->tag, sizeof ev->tag, "%.*s", (int)len, (const char *)b + k);
      k += len;
    } else if ((key & 7) == 5) {
      if (k + 4 > n) return 0;
      uint32_t u = (uint32_t)b[k] | (uint32_t)b[k + 1] << 8 | (uint32_t)b[k + 2] << 16 | (uint32_t)b[k + 3] << 24;
      if ((key >> 3) == 2) { memcpy(&ev->value, &u, 4); ev->has_value = 1; }
      k += 4;
    } else return 0;
  }
  return 1;
}
static int decode_event(const unsigned char *b, size_t n, event *ev) {
  size_t k = 0;
  memset(ev, 0, sizeof *ev);
  while (k < n) {
    uint64_t key, v, len;
    if (!rd_varint(b, n, &k, &key)) return 0;
    int field = (int)(key >> 3), wt = (int)(key & 7);
    if (wt == 1) {
      if (k + 8 > n) return 0;
      uint64_t u = 0;
      for (int i = 7; i >= 0; i--) u = u << 8 | b[k + (size_t)i];
      if (field == 1) memcpy(&ev->wall, &u, 8);
      k += 8;
    } else if (wt == 0) {
      if (!rd_varint(b, n, &k, &v)) return 0;
      if (field == 2) ev->step = (int64_t)v;
    } else if (wt == 2) {
      if (!rd_varint(b, n, &k, &len) || k + len > n) return 0;
      if (field == 3) snprintf(ev->version, sizeof ev->version, "%.*s", (int)len, (const char *)b + k);
      if (field == 5) { /* Summary: repeated Value value = 1 */
        size_t j = 0;
        const unsigned char *sb = b + k;
        while (j < len) {
          uint64_t skey, slen;
          if (!rd_varint(sb, len, &j, &skey) || (skey & 7) != 2 || !rd_varint(sb, len, &j, &slen) || j + slen > len)
            return 0;
          if ((skey >> 3) == 1 && !decode_value(sb + j, slen, ev)) return 0;
          j += slen;
        }
      }
      k += len;
    } else return 0;
  }
  return 1;
}
static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void test_tensorboard(void) {
  CHECK(ts__crc32c("123456789", 9) == 0xE3069283u); /* the CRC-32C check value (RFC 3720) */
  CHECK(ts__crc32c("", 0) == 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/tb/run1", g_dir);
  ts__tboard tb;
  CHECK_OK(ts__tboard_open(&tb, dir));
  const char *tags[] = {"train/loss", "train/lr", "eval/top1", "train/loss"};
  const double vals[] = {2.302585, 0.1, 0.875, NAN};
  const int64_t steps[] = {1, 1, 50, 5000000000LL};
  for (int i = 0; i < 4; i++) CHECK_OK(ts__tboard_scalar(&tb, tags[i], steps[i], vals[i]));
  char path[sizeof tb.path];
  snprintf(path, sizeof path, "%s", tb.path);
  ts__tboard_close(&tb);
  CHECK_MSG(strstr(path, "/events.out.tfevents.") != NULL, "%s", path);
  size_t n;
  unsigned char *b = (unsigned char *)slurp(path, &n);
  CHECK(b != NULL);
  if (!b) return;
  size_t k = 0;
  int rec = 0;
  while (k < n) {
    CHECK_MSG(k + 12 <= n, "record %d: header cut at %zu of %zu", rec, k, n);
    if (k + 12 > n) break;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | b[k + (size_t)i];
    CHECK_MSG(le32(b + k + 8) == ts__crc32c_masked(b + k, 8), "record %d: length CRC", rec);
    CHECK_MSG(k + 12 + len + 4 <= n, "record %d: payload cut", rec);
    if (k + 12 + len + 4 > n) break;
    CHECK_MSG(le32(b + k + 12 + len) == ts__crc32c_masked(b + k + 12, len), "record %d: data CRC", rec);
    event ev;
    CHECK_MSG(decode_event(b + k + 12, len, &ev), "record %d: not an Event protobuf", rec);
    CHECK_MSG(ev.wall > 1.5e9 && ev.wall < 1e10, "record %d: wall_time %f", rec, ev.wall);
    if (rec == 0) {
      CHECK_MSG(!strcmp(ev.version, "brain.Event:2"), "file_version '%s'", ev.version);
    } else if (rec <= 4) {
      int i = rec - 1;
      CHECK_MSG(!strcmp(ev.tag, tags[i]) && ev.step == steps[i] && ev.has_value, "record %d: %s@%lld", rec, ev.tag,
                (long long)ev.step);
      if (isnan(vals[i])) CHECK(isnan(ev.value));
      else CHECK_MSG(ev.value == (float)vals[i], "record %d: %g vs %g", rec, ev.value, vals[i]);
    }
    k += 12 + len + 4;
    rec++;
  }
  CHECK_MSG(rec == 5, "%d records", rec);
  free(b);
  /* a folder that cannot be made is an error naming the key */
  CHECK(ts__tboard_open(&tb, "/proc/no/such") != TS_OK && strstr(ts_last_error(), "log.tensorboard"));
}

static int labels_distinct(const ts__plot_axis *a) {
  for (int i = 0; i < a->nticks; i++)
    for (int j = i + 1; j < a->nticks; j++)
      if (!strcmp(a->label[i], a->label[j])) return 0;
  return a->nticks >= 2;
}

/* A one-epoch run: one eval point. The accuracy axis stays in 0..100% with distinct labels and
 * the point inside, the step axis has distinct labels; drawn, the point is mid-panel. */
static void test_plot_axes(void) {
  ts__plot_axis a;
  ts__plot_make_axis(0.8681, 0.8681, 0, 1, &a);
  CHECK_MSG(a.lo >= 0 && a.hi <= 1 && a.lo < 0.8681 && a.hi > 0.8681, "%g..%g", a.lo, a.hi);
  double f = (0.8681 - a.lo) / (a.hi - a.lo);
  CHECK_MSG(f > 0.2 && f < 0.8, "single accuracy at %.2f of the axis", f);
  CHECK_MSG(labels_distinct(&a), "%s .. %s", a.label[0], a.label[a.nticks - 1]);
  CHECK_MSG(strchr(a.label[0], '%') != NULL, "%s", a.label[0]);
  ts__plot_make_axis(468, 468, 1, 0, &a);
  f = (468 - a.lo) / (a.hi - a.lo);
  CHECK_MSG(labels_distinct(&a) && f > 0.2 && f < 0.8, "%s..%s, point at %.2f", a.label[0], a.label[a.nticks - 1], f);
  const double ranges[][2] = {{1, 468}, {0, 3}, {1, 2}, {0.31, 0.36}, {2.5e6, 2.7e10}, {1, 1e6}, {-3, 4}, {0.1, 0.1}, {0, 0}};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
    for (int integer = 0; integer < 2; integer++) {
      ts__plot_make_axis(ranges[i][0], ranges[i][1], integer, 0, &a);
      CHECK_MSG(labels_distinct(&a) && a.lo <= ranges[i][0] && a.hi >= ranges[i][1] && a.nticks <= 8,
                "[%g, %g] integer %d: %d ticks %s..%s", ranges[i][0], ranges[i][1], integer, a.nticks, a.label[0],
                a.label[a.nticks - 1]);
    }
  ts__plot_make_axis(0.05, 0.97, 0, 1, &a);
  CHECK_MSG(labels_distinct(&a) && a.lo >= 0 && a.hi <= 1 && a.lo <= 0.05 && a.hi >= 0.97, "%g..%g", a.lo, a.hi);

  ts__plot_data d;
  memset(&d, 0, sizeof d);
  const char *recs[] = {"{\"type\":\"run\",\"title\":\"one (one.yaml): mlp on fashion_mnist\"}",
                        "{\"type\":\"step\",\"step\":1,\"loss\":2.3}", "{\"type\":\"step\",\"step\":468,\"loss\":0.4}",
                        "{\"type\":\"eval\",\"step\":468,\"loss\":0.38,\"top1\":0.8681}"};
  for (int i = 0; i < 4; i++) CHECK_OK(ts__plot_line("one.jsonl", i + 1, recs[i], strlen(recs[i]), 0, &d));
  CHECK(!strcmp(d.title, "one (one.yaml): mlp on fashion_mnist"));
  unsigned char *px = malloc(3 * (size_t)TS_PLOT_W * TS_PLOT_H);
  if (!px) return;
  ts__plot_draw(&d, px);
  /* the accuracy panel spans x 580..960, y 50..350; its green point */
  double sx = 0, sy = 0;
  int n = 0, title_px = 0;
  for (int y = 0; y < TS_PLOT_H; y++)
    for (int x = 0; x < TS_PLOT_W; x++) {
      const unsigned char *q = px + 3 * ((size_t)y * TS_PLOT_W + x);
      if (y < 14 && q[0] < 128) title_px++;
      if (x >= 580 && y >= 50 && y <= 350 && q[0] == 44 && q[1] == 160 && q[2] == 44) { sx += x; sy += y; n++; }
    }
  CHECK_MSG(n > 10, "%d green pixels", n);
  if (n) {
    double fx = (sx / n - 580) / 380, fy = (sy / n - 50) / 300;
    CHECK_MSG(fx > 0.2 && fx < 0.8 && fy > 0.1 && fy < 0.9, "the lone accuracy point at (%.2f, %.2f) of the panel", fx, fy);
  }
  CHECK_MSG(title_px > 100, "title line: %d dark pixels", title_px);
  free(px);
  ts__plot_data_free(&d);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_progress_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  test_metrics_nonfinite();
  test_bar_width();
  test_plot_axes();
  test_tensorboard();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd)) {}
  return ts_test_finish("test_progress");
}
