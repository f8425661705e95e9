/* Progress display (a bar on a terminal, periodic lines otherwise) and the metrics file (JSON
 * lines: one record per logged step and per evaluation, and an `end` record). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_impl.h"

void ts__make_parent_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *c = buf + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      mkdir(buf, 0777);
      *c = '/';
    }
}

int ts__progress_open(ts__progress *p, const ts_config *cfg, int64_t total_steps,
                      int64_t steps_per_epoch, int resumed) {
  memset(p, 0, sizeof *p);
  p->mode = cfg->log.progress;
  p->tty = isatty(STDOUT_FILENO);
  if (p->mode == TS_PROGRESS_AUTO) p->mode = p->tty ? TS_PROGRESS_BAR : TS_PROGRESS_LINES;
  p->t_start = ts_time_now();
  p->total_steps = total_steps;
  p->steps_per_epoch = steps_per_epoch;
  p->epochs = steps_per_epoch > 0 ? (total_steps + steps_per_epoch - 1) / steps_per_epoch : 0;
  p->log_every = cfg->train.log_every > 0 ? cfg->train.log_every : 50;
  if (cfg->log.metrics[0]) {
    snprintf(p->metrics_path, sizeof p->metrics_path, "%s", cfg->log.metrics);
    ts__make_parent_dirs(cfg->log.metrics);
    p->metrics = fopen(cfg->log.metrics, resumed ? "a" : "w");
    if (!p->metrics)
      return ts_error_set(TS_EIO, "log.metrics: cannot open '%s' for writing: %s", cfg->log.metrics,
                          strerror(errno));
  }
  return TS_OK;
}

static void fmt_time(char *buf, size_t cap, double s) {
  if (!(s >= 0) || s > 359999) s = 0;
  int h = (int)(s / 3600), m = (int)(s / 60) % 60, sec = (int)s % 60;
  if (h)
    snprintf(buf, cap, "%d:%02d:%02d", h, m, sec);
  else
    snprintf(buf, cap, "%02d:%02d", m, sec);
}

static void clear_bar(ts__progress *p) {
  if (p->bar_open) {
    printf("\r\033[K");
    p->bar_open = 0;
  }
}

/* Every record written is checked: a metrics file cut short (full disk) is an error naming it.
 * Records are flushed at evaluations and at the end; a failed flush in between sets the error flag. */
static int metrics_check(ts__progress *p, int flush) {
  if (!p->metrics) return TS_OK;
  if ((flush && fflush(p->metrics)) || ferror(p->metrics)) {
    int e = errno;
    return ts_error_set(TS_EIO, "log.metrics: writing '%s' failed: %s", p->metrics_path,
                        e ? strerror(e) : "write error");
  }
  return TS_OK;
}

/* A number as JSON: null when it is not finite (JSON has no inf or NaN). */
static const char *jnum(char *buf, size_t cap, const char *fmt, double v) {
  if (!isfinite(v)) return "null";
  snprintf(buf, cap, fmt, v);
  return buf;
}

int ts__progress_step(ts__progress *p, const ts_step_info *s) {
  /* every overflow is recorded (rare, and what a loss-scaling run is read for) */
  if (p->metrics && (s->step % p->log_every == 0 || s->step == p->total_steps || s->step == 1 || s->overflow)) {
    char lb[32], gb[32];
    fprintf(p->metrics,
            "{\"type\":\"step\",\"step\":%lld,\"epoch\":%lld,\"loss\":%s,\"lr\":%.6g,"
            "\"grad_norm\":%s,\"loss_scale\":%.9g,\"overflow\":%d,\"step_ms\":%.3f,\"comm_wait_ms\":%.3f,"
            "\"samples_per_s\":%.1f,",
            (long long)s->step, (long long)s->epoch, jnum(lb, sizeof lb, "%.6g", s->loss), s->lr,
            jnum(gb, sizeof gb, "%.6g", s->grad_norm), s->loss_scale, s->overflow, s->step_ms, s->comm_wait_ms,
            s->samples_per_s);
    if (s->pipelined) /* this rank's schedule: idle time and blocked receives */
      fprintf(p->metrics, "\"bubble_ms\":%.3f,\"bubble_fraction\":%.4f,\"p2p_wait_ms\":%.3f,", s->bubble_ms,
              s->bubble_fraction, s->p2p_wait_ms);
    if (s->profiled) /* log.profile: the step broken down */
      fprintf(p->metrics,
              "\"data_ms\":%.3f,\"forward_ms\":%.3f,\"backward_ms\":%.3f,\"optimizer_ms\":%.3f,"
              "\"comm_exposed_ms\":%.3f,",
              s->data_ms, s->forward_ms, s->backward_ms, s->optimizer_ms, s->comm_exposed_ms);
    fprintf(p->metrics, "\"time_s\":%.3f}\n", ts_time_now() - p->t_start);
  }
  int rc = metrics_check(p, 0);
  if (rc || p->mode == TS_PROGRESS_OFF) return rc;
  double now = ts_time_now(), el = now - p->t_start;
  if (p->mode == TS_PROGRESS_BAR) {
    if (now - p->last_print < 0.1 && s->step != p->total_steps) return TS_OK;
    p->last_print = now;
    int64_t in_ep = p->steps_per_epoch ? (s->step - 1) % p->steps_per_epoch + 1 : s->step;
    double frac = p->steps_per_epoch ? (double)in_ep / (double)p->steps_per_epoch : 0;
    char bar[31], eta[32];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[30] = 0;
    fmt_time(eta, sizeof eta, s->samples_per_s > 0 ? (double)(p->total_steps - s->step) * s->step_ms / 1e3 : 0);
    printf("\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  eta %s",
           (long long)s->epoch + 1, (long long)p->epochs, bar, (long long)in_ep,
           (long long)p->steps_per_epoch, s->loss, s->samples_per_s, eta);
    fflush(stdout);
    p->bar_open = 1;
  } else if (s->step % p->log_every == 0 || s->step == p->total_steps) {
    char t[32];
    fmt_time(t, sizeof t, el);
    printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.0f samples/s  %.1f ms/step  [%s]\n",
           (long long)s->step, (long long)p->total_steps, (long long)s->epoch + 1, s->loss, s->lr,
           s->samples_per_s, s->step_ms, t);
    fflush(stdout);
  }
  return TS_OK;
}

int ts__progress_eval(ts__progress *p, const ts_eval_info *e) {
  if (p->metrics)
    fprintf(p->metrics,
            "{\"type\":\"eval\",\"step\":%lld,\"epoch\":%lld,\"samples\":%lld,\"loss\":%.6g,"
            "\"top1\":%.6f,\"top5\":%.6f,\"eval_s\":%.3f,\"time_s\":%.3f}\n",
            (long long)e->step, (long long)e->epoch, (long long)e->samples, e->loss, e->top1,
            e->top5, e->seconds, ts_time_now() - p->t_start);
  int rc = metrics_check(p, 1);
  if (rc || p->mode == TS_PROGRESS_OFF) return rc;
  clear_bar(p);
  printf("eval  step %lld  epoch %lld  loss %.4f  top1 %.2f%%  top5 %.2f%%  (%lld samples, %.1f s)\n",
         (long long)e->step, (long long)e->epoch + 1, e->loss, 100 * e->top1, 100 * e->top5,
         (long long)e->samples, e->seconds);
  fflush(stdout);
  return TS_OK;
}

void ts__progress_message(ts__progress *p, const char *fmt, ...) {
  if (p->mode == TS_PROGRESS_OFF) return;
  clear_bar(p);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

int ts__progress_record(ts__progress *p, const char *json) {
  if (!p->metrics) return TS_OK;
  fprintf(p->metrics, "%s\n", json);
  return metrics_check(p, 1);
}

int ts__progress_end(ts__progress *p, int64_t steps, double final_loss, double test_acc, int have_acc,
                     const char *extra) {
  double wall = ts_time_now() - p->t_start;
  if (p->metrics) {
    fprintf(p->metrics, "{\"type\":\"end\",\"steps\":%lld,\"final_loss\":%.6g,", (long long)steps, final_loss);
    if (have_acc) fprintf(p->metrics, "\"test_accuracy\":%.6f,", test_acc);
    if (extra) fputs(extra, p->metrics);
    fprintf(p->metrics, "\"wall_s\":%.3f}\n", wall);
  }
  int rc = metrics_check(p, 1);
  if (rc || p->mode == TS_PROGRESS_OFF) return rc;
  clear_bar(p);
  if (have_acc)
    printf("done: %lld steps in %.1f s, final loss %.4f, test accuracy %.2f%%\n", (long long)steps,
           wall, final_loss, 100 * test_acc);
  else
    printf("done: %lld steps in %.1f s, final loss %.4f\n", (long long)steps, wall, final_loss);
  fflush(stdout);
  return TS_OK;
}

void ts__progress_close(ts__progress *p) {
  clear_bar(p);
  if (p->metrics) fclose(p->metrics);
  p->metrics = NULL;
}
