/* Internals of src/train/plot.c, split so the metrics reader can be fuzzed
 * (tests/fuzz/fuzz_metrics.c): one line at a time into the series, then the drawing. */
#ifndef TS_TRAIN_PLOT_IMPL_H
#define TS_TRAIN_PLOT_IMPL_H

#include <stddef.h>

typedef struct { double *x, *y; int n, cap; } ts__plot_series;
typedef struct {
  ts__plot_series tl, el, ea; /* train loss, eval loss, eval top1 */
  char title[256];            /* from the file's last "run" record: name and config, "" if none */
} ts__plot_data;

/* An axis: the range drawn and its ticks at "nice" steps (1, 2, 2.5, 5 x 10^k), every label
 * distinct. */
#define TS_PLOT_MAX_TICKS 12
typedef struct {
  double lo, hi;
  int nticks;
  double tick[TS_PLOT_MAX_TICKS];
  char label[TS_PLOT_MAX_TICKS][24];
} ts__plot_axis;
/* The axis for values in [vmin, vmax] (vmin > vmax: no values). integer: steps (whole-number
 * ticks); percent: fractions shown as percentages and the range kept inside [0, 1]. A single
 * value (vmin == vmax) sits in the middle of the range. */
void ts__plot_make_axis(double vmin, double vmax, int integer, int percent, ts__plot_axis *ax);

#define TS_PLOT_W 1000
#define TS_PLOT_H 420

/* One line of a metrics file (len bytes, no newline; may contain NUL bytes). `last`: the final
 * line had no newline (a run still writing it): if it does not parse it is skipped with a
 * warning. Records without a string type and a finite step are skipped; a step outside
 * 0..1e15 is TS_EFORMAT; losses and accuracies that are not finite, null or beyond 1e30 are gaps.
 * A {"type":"run"} record's "title" (the last one) becomes the title line.
 * TS_EFORMAT naming name:lineno, or TS_ENOMEM. */
int ts__plot_line(const char *name, int lineno, const char *line, size_t len, int last, ts__plot_data *d);
/* Draws the two panels into px (TS_PLOT_W x TS_PLOT_H RGB). */
void ts__plot_draw(const ts__plot_data *d, unsigned char *px);
void ts__plot_data_free(ts__plot_data *d);

#endif
