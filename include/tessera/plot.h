/* Training curves as a PNG, drawn from a metrics file (JSON lines written by the trainer). */
#ifndef TESSERA_PLOT_H
#define TESSERA_PLOT_H

#ifdef __cplusplus
extern "C" {
#endif

/* The figure's default size and the limits of ts_plot_options' width and height, in pixels. */
#define TS_PLOT_W 1000
#define TS_PLOT_H 420
#define TS_PLOT_MIN_W 480
#define TS_PLOT_MIN_H 240
#define TS_PLOT_MAX_SIDE 4096

typedef struct {
  int width, height; /* pixels; 0 = TS_PLOT_W, TS_PLOT_H */
  int log_loss;      /* the loss panel on a log10 scale (losses <= 0 are left out, with a warning) */
  int log_lr;        /* the learning-rate panel on a log10 scale (rates <= 0 left out, with a warning) */
} ts_plot_options;

/* Reads `metrics_path` (records {"type":"step","step":..,"loss":..,"lr":..} and
 * {"type":"eval","step":..,"loss":..,"top1":..}) and writes a PNG with panels against step: loss
 * (training, and evaluation where present), evaluation top-1 accuracy, and the learning rate when
 * the step records carry one. The step axis ends at the last step (or a tick at most 5% beyond).
 * Written atomically. Errors name the file and line. opts NULL: the defaults. */
int ts_plot_metrics_with(const char *metrics_path, const char *png_path, const ts_plot_options *opts);
int ts_plot_metrics(const char *metrics_path, const char *png_path); /* default options */

/* Parses "WIDTHxHEIGHT" (e.g. "1600x600") within the limits above; TS_EINVAL naming `what` (the
 * option or config key) and the text otherwise. */
int ts_plot_parse_size(const char *text, const char *what, int *width, int *height);

#ifdef __cplusplus
}
#endif
#endif
