/* Internals of src/train/plot.c, split so the metrics reader can be fuzzed
 * (tests/fuzz/fuzz_metrics.c): one line at a time into the series, then the drawing. */
#ifndef TS_TRAIN_PLOT_IMPL_H
#define TS_TRAIN_PLOT_IMPL_H

#include <stddef.h>

#include "tessera/plot.h"

typedef struct { double *x, *y; int n, cap; } ts__plot_series;
typedef struct {
  ts__plot_series tl, el, ea, lr; /* train loss, eval loss, eval top1, learning rate (step records) */
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
 * ticks), the axis ending at the data's last step or at a tick at most 5% of the span beyond it
 * (1..2340 is drawn to 2340 with ticks 0..2000, never to 3000; the same at the start), so the
 * ticks need not sit at lo and hi; otherwise the range is padded out to ticks. percent: fractions
 * shown as percentages and the range kept inside [0, 1]. Values all >= 0 keep the axis >= 0. A
 * single value (vmin == vmax) sits in the middle of the range. Ticks all below 1e-3 (a learning
 * rate) are labelled with one exponent ("1.5e-4"). */
void ts__plot_make_axis(double vmin, double vmax, int integer, int percent, ts__plot_axis *ax);
/* A log10 axis for positive values in [vmin, vmax]: within three decades, ticks at 1, 2, 5 x 10^k
 * from the one at or below vmin to the one at or above vmax; beyond, at (every few) decades.
 * lo, hi and the ticks are the values themselves (not their logarithms). Labels "0.5", "2",
 * "1e-4". vmin <= 0 or no values: 1..10. */
void ts__plot_make_log_axis(double vmin, double vmax, ts__plot_axis *ax);

/* Where panel k of npanels sits in a w x h figure (panels in a row; the legend below the first). */
typedef struct { int x, y, w, h; } ts__plot_rect;
void ts__plot_panel_rect(int w, int h, int npanels, int k, ts__plot_rect *r);

/* The learning-rate curve's colour (R, G, B) */
#define TS_PLOT_LR_RGB 148, 103, 189

/* One line of a metrics file (len bytes, no newline; may contain NUL bytes). `last`: the final
 * line had no newline (a run still writing it): if it does not parse it is skipped with a
 * warning. Records without a string type and a finite step are skipped; a step outside
 * 0..1e15 is TS_EFORMAT; losses and accuracies that are not finite, null or beyond 1e30 are gaps.
 * A {"type":"run"} record's "title" (the last one) becomes the title line.
 * TS_EFORMAT naming name:lineno, or TS_ENOMEM. */
int ts__plot_line(const char *name, int lineno, const char *line, size_t len, int last, ts__plot_data *d);
/* Draws the panels into px (o's width x height RGB; NULL o or 0: TS_PLOT_W x TS_PLOT_H): loss,
 * accuracy and, where the step records carry a finite lr, the learning rate. With o's log scales,
 * the numbers of values <= 0 left out go to *skipped_loss and *skipped_lr (either may be NULL). */
void ts__plot_render(const ts__plot_data *d, const ts_plot_options *o, unsigned char *px, int *skipped_loss,
                     int *skipped_lr);
/* ts__plot_render at the default size without log scales. */
void ts__plot_draw(const ts__plot_data *d, unsigned char *px);
void ts__plot_data_free(ts__plot_data *d);

#endif
