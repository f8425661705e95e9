/* Training curves as a PNG, drawn from a metrics file (JSON lines written by the trainer). */
#ifndef TESSERA_PLOT_H
#define TESSERA_PLOT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `metrics_path` (records {"type":"step","step":..,"loss":..} and
 * {"type":"eval","step":..,"loss":..,"top1":..}) and writes a PNG with two panels: loss against
 * step (training, and evaluation where present) and evaluation top-1 accuracy against step.
 * Written atomically. Errors name the file and line. */
int ts_plot_metrics(const char *metrics_path, const char *png_path);

#ifdef __cplusplus
}
#endif
#endif
