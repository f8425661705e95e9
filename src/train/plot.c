/* A small raster plotter: two panels (loss, accuracy), axes with ticks, a 5x7 bitmap font for
 * labels, lines drawn with Bresenham; encoded with libpng. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tessera/base.h"
#include "../base/rfile.h"
#include "tessera/plot.h"
#include "plot_impl.h"

#define W TS_PLOT_W
#define H TS_PLOT_H

typedef struct { unsigned char r, g, b; } rgb;
typedef struct { unsigned char *px; } canvas;

static void put(canvas *c, int x, int y, rgb col) {
  if (x < 0 || y < 0 || x >= W || y >= H) return;
  unsigned char *p = c->px + 3 * ((size_t)y * W + x);
  p[0] = col.r; p[1] = col.g; p[2] = col.b;
}

static void line(canvas *c, int x0, int y0, int x1, int y1, rgb col, int thick) {
  /* callers pass points near the canvas; clamp so that the walk stays short in any case */
  x0 = x0 < -W ? -W : x0 > 2 * W ? 2 * W : x0; x1 = x1 < -W ? -W : x1 > 2 * W ? 2 * W : x1;
  y0 = y0 < -H ? -H : y0 > 2 * H ? 2 * H : y0; y1 = y1 < -H ? -H : y1 > 2 * H ? 2 * H : y1;
  int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    for (int t = 0; t < thick; t++) { put(c, x0, y0 + t, col); put(c, x0 + t, y0, col); }
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) { err += dy; x0 += sx; }
    if (e2 <= dx) { err += dx; y0 += sy; }
  }
}

/* 5x7 glyphs, one byte per row, bit 4 = leftmost column. */
static const struct { char ch; unsigned char rows[7]; } k_font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},                {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'a', {0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},       {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0, 0, 0x0E, 0x10, 0x10, 0x11, 0x0E}},       {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},       {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E}},    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'m', {0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0, 0, 0x16, 0x19, 0x11, 0x11, 0x11}},       {'o', {0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'p', {0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10}},       {'r', {0, 0, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},       {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0, 0, 0x11, 0x11, 0x11, 0x13, 0x0D}},       {'v', {0, 0, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0, 0, 0x11, 0x11, 0x15, 0x15, 0x0A}},       {'x', {0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0, 0, 0x11, 0x11, 0x0F, 0x01, 0x0E}},       {'j', {0x02, 0, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'q', {0, 0, 0x0D, 0x13, 0x0F, 0x01, 0x01}},       {'z', {0, 0, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}}, {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},             {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
};

static void text(canvas *c, int x, int y, const char *s, rgb col, int scale) {
  for (; *s; s++, x += 6 * scale) {
    char ch = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s; /* capitals drawn as small letters */
    for (size_t k = 0; k < sizeof k_font / sizeof k_font[0]; k++) {
      if (k_font[k].ch != ch) continue;
      for (int r = 0; r < 7; r++)
        for (int b = 0; b < 5; b++)
          if (k_font[k].rows[r] & (0x10 >> b))
            for (int dy = 0; dy < scale; dy++)
              for (int dx = 0; dx < scale; dx++) put(c, x + b * scale + dx, y + r * scale + dy, col);
      break;
    }
  }
}

typedef ts__plot_series series;

static int push(series *s, double x, double y) {
  if (s->n == s->cap) {
    int nc = s->cap ? 2 * s->cap : 256;
    double *nx = realloc(s->x, sizeof(double) * (size_t)nc), *ny;
    if (!nx) return -1;
    s->x = nx;
    ny = realloc(s->y, sizeof(double) * (size_t)nc);
    if (!ny) return -1;
    s->y = ny;
    s->cap = nc;
  }
  s->x[s->n] = x;
  s->y[s->n] = y;
  s->n++;
  return 0;
}

void ts__plot_make_axis(double vmin, double vmax, int integer, int percent, ts__plot_axis *ax) {
  memset(ax, 0, sizeof *ax);
  if (!(vmin <= vmax)) { vmin = 0; vmax = integer ? 1 : 1; }
  double lo = vmin, hi = vmax;
  if (hi == lo) { /* one value: in the middle of a small range around it */
    double w = integer ? 1 : percent ? 0.05 : lo != 0 ? 0.1 * fabs(lo) : 0.5;
    lo -= w; hi += w;
  } else if (!integer) {
    double pad = 0.05 * (hi - lo);
    lo -= pad; hi += pad;
  }
  if (percent) {
    if (lo < 0) lo = 0;
    if (hi > 1) hi = 1;
    if (hi <= lo) { lo = 0; hi = 1; }
  }
  if (integer && lo < 0 && vmin >= 0) lo = 0;
  double raw = (hi - lo) / 4, mag = pow(10, floor(log10(raw))), step = 10 * mag;
  static const double mult[] = {1, 2, 2.5, 5, 10};
  for (int k = 0; k < 5; k++)
    if (mult[k] * mag >= raw * (1 - 1e-9)) { step = mult[k] * mag; break; }
  if (integer && step < 1) step = 1;
  if (integer && step != floor(step)) step = ceil(step);
  double t0 = floor(lo / step + 1e-9) * step, t1 = ceil(hi / step - 1e-9) * step;
  if (percent) { /* ticks stay inside 0..100% */
    if (t0 < 0) t0 = 0;
    if (t1 > 1) t1 = 1;
  }
  int n = (int)lround((t1 - t0) / step) + 1;
  if (n > TS_PLOT_MAX_TICKS) n = TS_PLOT_MAX_TICKS;
  if (n < 2) { n = 2; t1 = t0 + step; }
  ax->lo = t0;
  ax->hi = t0 + (n - 1) * step;
  ax->nticks = n;
  /* decimals so that every multiple of the step prints exactly (labels distinct) */
  double shown = percent ? 100 * step : step;
  int dec = 0;
  while (dec < 6 && fabs(shown * pow(10, dec) - round(shown * pow(10, dec))) > 1e-6 * pow(10, dec)) dec++;
  for (int i = 0; i < n; i++) {
    double v = t0 + i * step;
    ax->tick[i] = v;
    double sv = percent ? 100 * v : v;
    if (fabs(sv) < 1e-12 * shown) sv = 0;
    if (fabs(sv) >= 1e7)
      snprintf(ax->label[i], sizeof ax->label[i], "%.3g", sv);
    else
      snprintf(ax->label[i], sizeof ax->label[i], "%.*f%s", dec, sv, percent ? "%" : "");
  }
}

/* Draws one panel at (px,py) of size (pw,ph) with up to 2 series. */
static void panel(canvas *c, int px, int py, int pw, int ph, const char *title, series *a, rgb ca,
                  series *b, rgb cb, int percent) {
  const rgb axis = {40, 40, 40}, grid = {225, 225, 225};
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  series *ss[2] = {a, b};
  for (int k = 0; k < 2; k++)
    for (int i = 0; ss[k] && i < ss[k]->n; i++) {
      if (!isfinite(ss[k]->y[i])) continue;
      x0 = fmin(x0, ss[k]->x[i]); x1 = fmax(x1, ss[k]->x[i]);
      y0 = fmin(y0, ss[k]->y[i]); y1 = fmax(y1, ss[k]->y[i]);
    }
  text(c, px + pw / 2 - (int)strlen(title) * 6, py - 24, title, axis, 2);
  ts__plot_axis xa, ya;
  ts__plot_make_axis(x0, x1, 1, 0, &xa);
  ts__plot_make_axis(y0, y1, 0, percent, &ya);
  for (int t = 0; t < ya.nticks; t++) {
    int gy = py + ph - (int)lround((ya.tick[t] - ya.lo) / (ya.hi - ya.lo) * ph);
    line(c, px, gy, px + pw, gy, grid, 1);
    text(c, px - 6 * (int)strlen(ya.label[t]) - 6, gy - 3, ya.label[t], axis, 1);
  }
  for (int t = 0; t < xa.nticks; t++) {
    int gx = px + (int)lround((xa.tick[t] - xa.lo) / (xa.hi - xa.lo) * pw);
    line(c, gx, py, gx, py + ph, grid, 1);
    text(c, gx - 3 * (int)strlen(xa.label[t]), py + ph + 8, xa.label[t], axis, 1);
  }
  x0 = xa.lo; x1 = xa.hi; y0 = ya.lo; y1 = ya.hi;
  text(c, px + pw / 2 - 12, py + ph + 22, "step", axis, 1);
  line(c, px, py + ph, px + pw, py + ph, axis, 1);
  line(c, px, py, px, py + ph, axis, 1);
  for (int k = 0; k < 2; k++) {
    if (!ss[k]) continue;
    rgb col = k ? cb : ca;
    int lx = 0, ly = 0, have = 0;
    for (int i = 0; i < ss[k]->n; i++) {
      if (!isfinite(ss[k]->y[i])) { have = 0; continue; } /* a gap where the value is not finite */
      int X = px + (int)lround((ss[k]->x[i] - x0) / (x1 - x0) * pw);
      int Y = py + ph - (int)lround((ss[k]->y[i] - y0) / (y1 - y0) * ph);
      if (have) line(c, lx, ly, X, Y, col, 2);
      if (ss[k]->n < 200) line(c, X - 2, Y, X + 2, Y, col, 3);
      if (ss[k]->n <= 3) { /* a lone point: a cross that shows */
        line(c, X - 5, Y - 5, X + 5, Y + 5, col, 2);
        line(c, X - 5, Y + 5, X + 5, Y - 5, col, 2);
      }
      lx = X; ly = Y; have = 1;
    }
  }
}

static int write_png(const char *path, const canvas *c) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return ts_error_set(TS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    unlink(tmp);
    return ts_error_set(TS_EIO, "%s: PNG encoding failed", path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, W, H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < H; y++) png_write_row(png, c->px + 3 * (size_t)y * W);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    unlink(tmp);
    return ts_error_set(TS_EIO, "%s: cannot write: %s", path, strerror(errno));
  }
  return TS_OK;
}

/* A plotted value: finite and not absurdly large (the axis span must stay finite), else a gap. */
static double plot_value(const cJSON *v) {
  double y = v->valuedouble;
  return isfinite(y) && fabs(y) <= 1e30 ? y : NAN;
}

/* Files written before metrics went through cJSON have bare nan / -nan / inf / -inf as values
 * (printf's spelling): those read as null, so a diverging run's old file still plots. */
static cJSON *parse_legacy(const char *text, size_t len) {
  if (len > (1u << 26)) return NULL;
  /* "nan" / "inf" become "null": one byte more for each (a ':' and 3 letters at least) */
  char *b = malloc(len + len / 4 + 1);
  if (!b) return NULL;
  size_t n = 0;
  int changed = 0;
  for (size_t i = 0; i < len;) {
    if (text[i] == ':') {
      b[n++] = text[i++];
      size_t k = i;
      while (k < len && text[k] == ' ') k++;
      size_t t = k + (k < len && (text[k] == '-' || text[k] == '+'));
      static const char *const words[] = {"nan", "inf", "infinity"};
      size_t w = 0;
      for (int q = 2; q >= 0 && !w; q--) {
        size_t L = strlen(words[q]);
        if (t + L <= len && !strncasecmp(text + t, words[q], L) && (t + L == len || text[t + L] == ',' ||
                                                                   text[t + L] == '}' || text[t + L] == ' '))
          w = L;
      }
      if (w) {
        memcpy(b + n, "null", 4);
        n += 4;
        i = t + w;
        changed = 1;
      }
      continue;
    }
    b[n++] = text[i++];
  }
  cJSON *j = changed ? cJSON_ParseWithLength(b, n) : NULL;
  free(b);
  return j;
}

int ts__plot_line(const char *name, int lineno, const char *text, size_t len, int last, ts__plot_data *d) {
  size_t k = 0;
  while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r')) k++;
  if (k == len) return TS_OK;
  cJSON *j = cJSON_ParseWithLength(text, len);
  if (!j) j = parse_legacy(text, len);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    if (last) {
      ts_log(TS_LOG_WARN, "%s:%d: incomplete last line skipped (the run may still be writing it)", name, lineno);
      return TS_OK;
    }
    return ts_error_set(TS_EFORMAT, "%s:%d: not a JSON object", name, lineno);
  }
  int rc = TS_OK;
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
  const cJSON *loss = cJSON_GetObjectItemCaseSensitive(j, "loss");
  const cJSON *top1 = cJSON_GetObjectItemCaseSensitive(j, "top1");
  if (cJSON_IsString(type) && !strcmp(type->valuestring, "run")) {
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    if (cJSON_IsString(title)) snprintf(d->title, sizeof d->title, "%s", title->valuestring);
  }
  if (cJSON_IsString(type) && cJSON_IsNumber(step)) {
    double x = step->valuedouble;
    if (!isfinite(x) || x < 0 || x > 1e15) {
      rc = ts_error_set(TS_EFORMAT, "%s:%d: step %g: expected a step number 0..1e15", name, lineno, x);
    } else {
      int is_eval = !strcmp(type->valuestring, "eval");
      if (cJSON_IsNumber(loss) && push(is_eval ? &d->el : &d->tl, x, plot_value(loss))) rc = TS_ENOMEM;
      if (!rc && is_eval && cJSON_IsNumber(top1) && push(&d->ea, x, plot_value(top1))) rc = TS_ENOMEM;
      if (rc) ts_error_set(rc, "plot: out of memory");
    }
  }
  cJSON_Delete(j);
  return rc;
}

void ts__plot_draw(const ts__plot_data *d, unsigned char *px) {
  canvas c = {px};
  memset(c.px, 255, 3 * (size_t)W * H);
  const rgb blue = {31, 119, 180}, orange = {255, 127, 14}, green = {44, 160, 44};
  ts__plot_data m = *d; /* panel() takes non-const series; it does not change them */
  if (d->title[0]) { /* the run's name and config, cut to the width */
    char t[168];
    snprintf(t, sizeof t, "%.167s", d->title);
    text(&c, W / 2 - 3 * (int)strlen(t), 6, t, (rgb){40, 40, 40}, 1);
  }
  panel(&c, 80, 50, 380, 300, "loss", &m.tl, blue, &m.el, orange, 0);
  panel(&c, 580, 50, 380, 300, "accuracy (top1)", &m.ea, green, NULL, green, 1);
  text(&c, 90, 395, "train", blue, 1);
  text(&c, 130, 395, "eval", orange, 1);
}

void ts__plot_data_free(ts__plot_data *d) {
  free(d->tl.x); free(d->tl.y); free(d->el.x); free(d->el.y); free(d->ea.x); free(d->ea.y);
  memset(d, 0, sizeof *d);
}

int ts_plot_metrics(const char *metrics_path, const char *png_path) {
  FILE *f;
  int rc = ts__file_fopen_read(metrics_path, "cannot open", &f);
  if (rc) return rc;
  ts__plot_data d = {0};
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n;
  int lineno = 0;
  while (rc == TS_OK && (n = getline(&buf, &cap, f)) > 0) {
    lineno++;
    int last = buf[n - 1] != '\n';
    rc = ts__plot_line(metrics_path, lineno, buf, (size_t)n - !last, last, &d);
  }
  if (rc == TS_OK && ferror(f)) rc = ts_error_set(TS_EIO, "%s: read error", metrics_path);
  free(buf);
  fclose(f);
  if (rc == TS_OK && d.tl.n == 0 && d.el.n == 0)
    rc = ts_error_set(TS_EFORMAT, "%s: no step or eval records with a loss", metrics_path);
  if (rc == TS_OK) {
    canvas c = {malloc(3 * (size_t)W * H)};
    if (!c.px) {
      rc = ts_error_set(TS_ENOMEM, "plot: out of memory");
    } else {
      ts__plot_draw(&d, c.px);
      rc = write_png(png_path, &c);
      free(c.px);
    }
  }
  ts__plot_data_free(&d);
  return rc;
}
