/* Internals of src/train/plot.c, split so the metrics reader can be fuzzed
 * (tests/fuzz/fuzz_metrics.c): one line at a time into the series, then the drawing. */
#ifndef TS_TRAIN_PLOT_IMPL_H
#define TS_TRAIN_PLOT_IMPL_H

#include <stddef.h>

typedef struct { double *x, *y; int n, cap; } ts__plot_series;
typedef struct { ts__plot_series tl, el, ea; } ts__plot_data; /* train loss, eval loss, eval top1 */

#define TS_PLOT_W 1000
#define TS_PLOT_H 420

/* One line of a metrics file (len bytes, no newline; may contain NUL bytes). `last`: the final
 * line had no newline (a run still writing it): if it does not parse it is skipped with a
 * warning. Records without a string type and a finite step are skipped; a step outside
 * 0..1e15 is TS_EFORMAT; losses and accuracies that are not finite or beyond 1e30 are gaps.
 * TS_EFORMAT naming name:lineno, or TS_ENOMEM. */
int ts__plot_line(const char *name, int lineno, const char *line, size_t len, int last, ts__plot_data *d);
/* Draws the two panels into px (TS_PLOT_W x TS_PLOT_H RGB). */
void ts__plot_draw(const ts__plot_data *d, unsigned char *px);
void ts__plot_data_free(ts__plot_data *d);

#endif
