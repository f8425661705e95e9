/* Internal pieces of the trainer shared by its files. */
#ifndef TS_TRAIN_IMPL_H
#define TS_TRAIN_IMPL_H

#include <stdio.h>

#include "tessera/data.h"
#include "tessera/train.h"

/* Train and test sources for a config (test may come back NULL: no test data). */
int ts__train_sources(const ts_config *cfg, ts_source **train, ts_source **test);
/* A view of samples [off, off+n) of base (which it then owns). */
int ts__source_subset(ts_source *base, int64_t off, int64_t n, ts_source **out);
/* The same without ownership: base must outlive the view. */
int ts__source_view(ts_source *base, int64_t off, int64_t n, ts_source **out);

/* Progress display and metrics file. */
typedef struct {
  ts_progress_mode mode;
  int tty;
  FILE *metrics;
  char metrics_path[1024];
  double t_start, last_print;
  int64_t total_steps, steps_per_epoch, epochs;
  int64_t log_every;
  int bar_open;
} ts__progress;

int ts__progress_open(ts__progress *p, const ts_config *cfg, int64_t total_steps,
                      int64_t steps_per_epoch, int resumed);
void ts__progress_step(ts__progress *p, const ts_step_info *s);
void ts__progress_eval(ts__progress *p, const ts_eval_info *e);
void ts__progress_message(ts__progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ts__progress_end(ts__progress *p, int64_t steps, double final_loss, double test_acc,
                      int have_acc);
void ts__progress_close(ts__progress *p);

#endif
