/* A small raster plotter: two or three panels (loss, accuracy, learning rate), axes with ticks, a 5x7 bitmap font for
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

typedef struct { unsigned char r, g, b; } rgb;
typedef struct { unsigned char *px; int w, h; } canvas;

static void put(canvas *c, int x, int y, rgb col) {
  if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
  unsigned char *p = c->px + 3 * ((size_t)y * c->w + x);
  p[0] = col.r; p[1] = col.g; p[2] = col.b;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void line(canvas *c, int x0, int y0, int x1, int y1, rgb col, int thick) {
  /* callers pass points near the canvas; clamp so that the walk stays short in any case */
  const int W = c->w, H = c->h;
  x0 = clampi(x0, -W, 2 * W); x1 = clampi(x1, -W, 2 * W);
  y0 = clampi(y0, -H, 2 * H); y1 = clampi(y1, -H, 2 * H);
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

/* "1.5e-4": v as mantissa (dec decimals) times 10^e */
static void sci_label(char *out, size_t cap, double v, int e, int dec) {
  if (v == 0) { snprintf(out, cap, "0"); return; }
  snprintf(out, cap, "%.*fe%d", dec, v / pow(10, e), e);
}

/* A step (1, 2, 2.5 or 5 x 10^k) near raw; integer: a whole number. */
static double nice_step(double raw, int integer) {
  double mag = pow(10, floor(log10(raw))), step = 10 * mag;
  static const double mult[] = {1, 2, 2.5, 5, 10};
  for (int k = 0; k < 5; k++)
    if (mult[k] * mag >= raw * (1 - 1e-9)) { step = mult[k] * mag; break; }
  if (integer && step < 1) step = 1;
  if (integer && step != floor(step)) step = ceil(step);
  return step;
}

void ts__plot_make_axis(double vmin, double vmax, int integer, int percent, ts__plot_axis *ax) {
  memset(ax, 0, sizeof *ax);
  if (!(vmin <= vmax)) { vmin = 0; vmax = 1; }
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
  if (lo < 0 && vmin >= 0) lo = 0; /* steps, losses, rates: nothing below 0 to show */
  double step, t0, t1, first;
  int n;
  if (integer) {
    /* the step axis ends where the data does, or at a tick at most 5% of the span beyond it
     * (a 2,340-step run ends at 2,340, not 3,000; 1..500 ends at 500), the same at its start */
    double span = hi - lo, slack = 0.05 * span;
    step = nice_step(span / 5, 1);
    t0 = floor(lo / step + 1e-9) * step;
    t1 = ceil(hi / step - 1e-9) * step;
    if (lo - t0 <= slack) lo = t0;
    if (t1 - hi <= slack) hi = t1;
    first = ceil(lo / step - 1e-9) * step;
    n = (int)floor((hi - first) / step + 1e-9) + 1;
    if (n < 2) { /* no two ticks inside: widen to the ticks around the data */
      lo = first = t0;
      hi = t1 > t0 ? t1 : t0 + step;
      n = (int)lround((hi - lo) / step) + 1;
    }
  } else {
    step = nice_step((hi - lo) / 4, 0);
    t0 = floor(lo / step + 1e-9) * step;
    t1 = ceil(hi / step - 1e-9) * step;
    if (percent) { /* ticks stay inside 0..100% */
      if (t0 < 0) t0 = 0;
      if (t1 > 1) t1 = 1;
    }
    n = (int)lround((t1 - t0) / step) + 1;
    if (n < 2) { n = 2; t1 = t0 + step; }
    lo = first = t0;
    hi = t0 + (n - 1) * step;
  }
  if (n > TS_PLOT_MAX_TICKS) n = TS_PLOT_MAX_TICKS;
  if (n < 1) n = 1;
  ax->lo = lo;
  ax->hi = hi;
  ax->nticks = n;
  /* decimals so that every multiple of the step prints exactly (labels distinct) */
  double shown = percent ? 100 * step : step;
  int dec = 0;
  while (dec < 6 && fabs(shown * pow(10, dec) - round(shown * pow(10, dec))) > 1e-6 * pow(10, dec)) dec++;
  /* values below 1e-3 (a learning rate of 3e-4): one exponent for the axis, "1.5e-4" */
  double big = fmax(fabs(first), fabs(first + (n - 1) * step));
  int sci = !percent && big > 0 && big < 1e-3, e = sci ? (int)floor(log10(big) + 1e-9) : 0, sdec = 0;
  while (sci && sdec < 6 && fabs(step / pow(10, e) * pow(10, sdec) - round(step / pow(10, e) * pow(10, sdec))) >
                                1e-6 * pow(10, sdec))
    sdec++;
  for (int i = 0; i < n; i++) {
    double v = first + i * step;
    ax->tick[i] = v;
    double sv = percent ? 100 * v : v;
    if (fabs(sv) < 1e-12 * shown) sv = 0;
    if (sci)
      sci_label(ax->label[i], sizeof ax->label[i], sv, e, sdec);
    else if (fabs(sv) >= 1e7)
      snprintf(ax->label[i], sizeof ax->label[i], "%.3g", sv);
    else
      snprintf(ax->label[i], sizeof ax->label[i], "%.*f%s", dec, sv, percent ? "%" : "");
  }
}

void ts__plot_make_log_axis(double vmin, double vmax, ts__plot_axis *ax) {
  memset(ax, 0, sizeof *ax);
  if (!(vmin > 0 && vmin <= vmax)) { vmin = 1; vmax = 10; }
  int e0 = (int)floor(log10(vmin) + 1e-9), e1 = (int)ceil(log10(vmax) - 1e-9);
  if (e1 <= e0) e1 = e0 + 1;
  int n = 0;
  if (e1 - e0 <= 3) { /* a few decades: ticks at 1, 2, 5 x 10^k, the axis from the one below the
                       * smallest value to the one above the largest */
    static const double m[] = {1, 2, 5};
    double lo = pow(10, e0), hi = 0;
    for (int e = e0; e <= e1; e++)
      for (int k = 0; k < 3; k++) {
        double v = m[k] * pow(10, e);
        if (v <= vmin * (1 + 1e-9)) lo = v;
        if (hi == 0 && v >= vmax * (1 - 1e-9)) hi = v;
      }
    if (hi == 0) hi = pow(10, e1);
    if (hi <= lo) { lo /= 2; hi *= 2; } /* one value: between its neighbours */
    for (int e = e0; e <= e1 && n < TS_PLOT_MAX_TICKS; e++)
      for (int k = 0; k < 3 && n < TS_PLOT_MAX_TICKS; k++) {
        double v = m[k] * pow(10, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ax->tick[n++] = v;
      }
    ax->lo = lo;
    ax->hi = hi;
  } else { /* decades, every one or every few */
    int every = (e1 - e0 + TS_PLOT_MAX_TICKS - 2) / (TS_PLOT_MAX_TICKS - 1);
    if (every < 1) every = 1;
    e0 = (int)floor((double)e0 / every) * every;
    e1 = (int)ceil((double)e1 / every) * every;
    for (int e = e0; e <= e1 && n < TS_PLOT_MAX_TICKS; e += every) ax->tick[n++] = pow(10, e);
    ax->lo = pow(10, e0);
    ax->hi = pow(10, e1);
  }
  ax->nticks = n;
  for (int i = 0; i < n; i++) {
    double v = ax->tick[i];
    if (v >= 1e-3 && v < 1e5)
      snprintf(ax->label[i], sizeof ax->label[i], "%g", v);
    else {
      int e = (int)floor(log10(v) + 1e-9);
      snprintf(ax->label[i], sizeof ax->label[i], "%.0fe%d", v / pow(10, e), e);
    }
  }
}

void ts__plot_panel_rect(int w, int h, int npanels, int k, ts__plot_rect *r) {
  int gap = npanels <= 2 ? 120 : 100; /* the next panel's tick labels and some air */
  if (npanels < 1) npanels = 1;
  r->w = (w - 120 - (npanels - 1) * gap) / npanels;
  r->h = h - 120;
  r->x = 80 + k * (r->w + gap);
  r->y = 50;
}

/* Draws one panel in r with up to 3 series. logy: a log scale, where values <= 0 are not drawn
 * (their number is added to *skipped). */
static void panel(canvas *c, const ts__plot_rect *r, const char *title, series *const *ss, const rgb *cols, int ns,
                  int percent, int logy, int *skipped) {
  const rgb axis = {40, 40, 40}, grid = {225, 225, 225};
  const int px = r->x, py = r->y, pw = r->w, ph = r->h;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int k = 0; k < ns; k++)
    for (int i = 0; ss[k] && i < ss[k]->n; i++) {
      double y = ss[k]->y[i];
      if (!isfinite(y)) continue;
      if (logy && y <= 0) { ++*skipped; continue; }
      x0 = fmin(x0, ss[k]->x[i]); x1 = fmax(x1, ss[k]->x[i]);
      y0 = fmin(y0, y); y1 = fmax(y1, y);
    }
  text(c, px + pw / 2 - (int)strlen(title) * 6, py - 24, title, axis, 2);
  ts__plot_axis xa, ya;
  ts__plot_make_axis(x0, x1, 1, 0, &xa);
  if (logy) {
    ts__plot_make_log_axis(y0, y1, &ya);
    ya.lo = log10(ya.lo); ya.hi = log10(ya.hi); /* drawn in log10 units */
    for (int t = 0; t < ya.nticks; t++) ya.tick[t] = log10(ya.tick[t]);
  } else {
    ts__plot_make_axis(y0, y1, 0, percent, &ya);
  }
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
  line(c, px + pw, py, px + pw, py + ph, grid, 1); /* where the step axis ends */
  for (int k = 0; k < ns; k++) {
    if (!ss[k]) continue;
    rgb col = cols[k];
    int lx = 0, ly = 0, have = 0;
    for (int i = 0; i < ss[k]->n; i++) {
      double y = ss[k]->y[i];
      if (!isfinite(y) || (logy && y <= 0)) { have = 0; continue; } /* a gap where the value is not finite */
      if (logy) y = log10(y);
      int X = px + (int)lround((ss[k]->x[i] - x0) / (x1 - x0) * pw);
      int Y = py + ph - (int)lround((y - y0) / (y1 - y0) * ph);
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
  png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < c->h; y++) png_write_row(png, c->px + 3 * (size_t)y * c->w);
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
  const cJSON *lr = cJSON_GetObjectItemCaseSensitive(j, "lr");
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
      int is_step = !strcmp(type->valuestring, "step");
      if (!rc && is_step && cJSON_IsNumber(lr) && push(&d->lr, x, plot_value(lr))) rc = TS_ENOMEM;
      if (rc) ts_error_set(rc, "plot: out of memory");
    }
  }
  cJSON_Delete(j);
  return rc;
}

static void size_of(const ts_plot_options *o, int *w, int *h) {
  *w = o && o->width > 0 ? o->width : TS_PLOT_W;
  *h = o && o->height > 0 ? o->height : TS_PLOT_H;
}

static int has_finite(const series *s) {
  for (int i = 0; i < s->n; i++)
    if (isfinite(s->y[i])) return 1;
  return 0;
}

void ts__plot_render(const ts__plot_data *d, const ts_plot_options *o, unsigned char *px, int *skipped_loss,
                     int *skipped_lr) {
  canvas c = {px, 0, 0};
  size_of(o, &c.w, &c.h);
  memset(c.px, 255, 3 * (size_t)c.w * c.h);
  const rgb blue = {31, 119, 180}, orange = {255, 127, 14}, green = {44, 160, 44}, purple = {TS_PLOT_LR_RGB};
  ts__plot_data m = *d; /* panel() takes non-const series; it does not change them */
  if (d->title[0]) { /* the run's name and config, cut to the width */
    char t[256];
    int maxc = (c.w - 12) / 6;
    snprintf(t, sizeof t, "%.*s", maxc < 255 ? maxc : 255, d->title);
    text(&c, c.w / 2 - 3 * (int)strlen(t), 6, t, (rgb){40, 40, 40}, 1);
  }
  int np = has_finite(&d->lr) ? 3 : 2, sl = 0, sr = 0; /* files from before lr was logged: two */
  ts__plot_rect r;
  series *loss[2] = {&m.tl, &m.el}, *acc[1] = {&m.ea}, *lr[1] = {&m.lr};
  const rgb lcol[2] = {blue, orange};
  int log_loss = o && o->log_loss, log_lr = o && o->log_lr;
  ts__plot_panel_rect(c.w, c.h, np, 0, &r);
  panel(&c, &r, log_loss ? "loss (log)" : "loss", loss, lcol, 2, 0, log_loss, &sl);
  text(&c, r.x + 10, c.h - 25, "train", blue, 1);
  text(&c, r.x + 50, c.h - 25, "eval", orange, 1);
  ts__plot_panel_rect(c.w, c.h, np, 1, &r);
  panel(&c, &r, "accuracy (top1)", acc, &green, 1, 1, 0, &sr);
  if (np == 3) {
    sr = 0;
    ts__plot_panel_rect(c.w, c.h, np, 2, &r);
    panel(&c, &r, log_lr ? "learning rate (log)" : "learning rate", lr, &purple, 1, 0, log_lr, &sr);
  }
  if (skipped_loss) *skipped_loss = sl;
  if (skipped_lr) *skipped_lr = sr;
}

void ts__plot_draw(const ts__plot_data *d, unsigned char *px) { ts__plot_render(d, NULL, px, NULL, NULL); }

void ts__plot_data_free(ts__plot_data *d) {
  ts__plot_series *all[] = {&d->tl, &d->el, &d->ea, &d->lr};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) { free(all[i]->x); free(all[i]->y); }
  memset(d, 0, sizeof *d);
}

int ts_plot_parse_size(const char *text, const char *what, int *width, int *height) {
  char *end;
  errno = 0;
  long w = text ? strtol(text, &end, 10) : 0, h = 0;
  int ok = text && end != text && (*end == 'x' || *end == 'X') && errno == 0;
  if (ok) {
    const char *p = end + 1;
    h = strtol(p, &end, 10);
    ok = end != p && *end == 0 && errno == 0 && p[0] >= '0' && p[0] <= '9' && text[0] >= '0' && text[0] <= '9';
  }
  if (!ok || w < TS_PLOT_MIN_W || w > TS_PLOT_MAX_SIDE || h < TS_PLOT_MIN_H || h > TS_PLOT_MAX_SIDE)
    return ts_error_set(TS_EINVAL, "%s '%s': expected WIDTHxHEIGHT in pixels, %d..%d x %d..%d (default %dx%d)", what,
                        text ? text : "", TS_PLOT_MIN_W, TS_PLOT_MAX_SIDE, TS_PLOT_MIN_H, TS_PLOT_MAX_SIDE, TS_PLOT_W,
                        TS_PLOT_H);
  *width = (int)w;
  *height = (int)h;
  return TS_OK;
}

int ts_plot_metrics_with(const char *metrics_path, const char *png_path, const ts_plot_options *opts) {
  int w, h;
  size_of(opts, &w, &h);
  if (w < TS_PLOT_MIN_W || w > TS_PLOT_MAX_SIDE || h < TS_PLOT_MIN_H || h > TS_PLOT_MAX_SIDE)
    return ts_error_set(TS_EINVAL, "plot: size %dx%d: expected %d..%d x %d..%d pixels", w, h, TS_PLOT_MIN_W,
                        TS_PLOT_MAX_SIDE, TS_PLOT_MIN_H, TS_PLOT_MAX_SIDE);
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
    canvas c = {malloc(3 * (size_t)w * h), w, h};
    if (!c.px) {
      rc = ts_error_set(TS_ENOMEM, "plot: out of memory");
    } else {
      int sl = 0, sr = 0;
      ts__plot_render(&d, opts, c.px, &sl, &sr);
      if (sl)
        ts_log(TS_LOG_WARN, "%s: log scale: %d loss value%s <= 0 not drawn", metrics_path, sl, sl == 1 ? "" : "s");
      if (sr)
        ts_log(TS_LOG_WARN, "%s: log scale: %d learning rate%s <= 0 not drawn", metrics_path, sr, sr == 1 ? "" : "s");
      rc = write_png(png_path, &c);
      free(c.px);
    }
  }
  ts__plot_data_free(&d);
  return rc;
}

int ts_plot_metrics(const char *metrics_path, const char *png_path) {
  return ts_plot_metrics_with(metrics_path, png_path, NULL);
}
