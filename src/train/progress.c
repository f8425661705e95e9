/* Progress display (a bar on a terminal, periodic lines otherwise) and the metrics file (JSON
 * lines: one record per logged step and per evaluation, and an `end` record). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/afile.h"
#include "train_impl.h"

static int write_record(ts__progress *p, cJSON *o, int flush);

/* The run's name: the config file's name without folder and extension ("config" without one). */
void ts__run_name(const ts_config *cfg, char *out, size_t cap) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  const char *b = strrchr(src, '/');
  b = b ? b + 1 : src;
  snprintf(out, cap, "%s", b);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = 0;
}

/* "name (file): model on data, optimizer lr X, batch B, mode[, amp]" */
void ts__run_title(const ts_config *cfg, char *out, size_t cap) {
  char name[128], model[64], data[64], opt[64], lr[32], batch[32], mode[64], amp[16];
  ts__run_name(cfg, name, sizeof name);
  if (ts_config_get(cfg, "model.name", model, sizeof model)) snprintf(model, sizeof model, "?");
  snprintf(data, sizeof data, "%s", ts_data_kind_name(cfg->data.name));
  if (ts_config_get(cfg, "optimizer.name", opt, sizeof opt)) snprintf(opt, sizeof opt, "?");
  if (ts_config_get(cfg, "optimizer.lr", lr, sizeof lr)) snprintf(lr, sizeof lr, "?");
  if (ts_config_get(cfg, "train.batch_size", batch, sizeof batch)) snprintf(batch, sizeof batch, "?");
  if (ts_config_get(cfg, "parallel.mode", mode, sizeof mode)) snprintf(mode, sizeof mode, "?");
  if (ts_config_get(cfg, "train.amp_level", amp, sizeof amp)) snprintf(amp, sizeof amp, "O0");
  snprintf(out, cap, "%s (%s): %s on %s, %s lr %s, batch %s, %s%s%s", name, cfg->source[0] ? cfg->source : "config",
           model, data, opt, lr, batch, mode, strcmp(amp, "O0") ? ", amp " : "", strcmp(amp, "O0") ? amp : "");
}

/* Whether stdout is the user's terminal. Under mpirun (and so under `tessera launch`) a rank's
 * stdout is a pseudo-terminal of the launcher's daemon whatever the launcher's own stdout is (a log
 * file included), so there it is taken from TESSERA_TTY=1, which `tessera launch` sets when its
 * own stdout is a terminal; elsewhere isatty. */
static int stdout_is_terminal(void) {
  static const char *const launched[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof launched / sizeof launched[0]; i++)
    if (getenv(launched[i])) {
      const char *t = getenv("TESSERA_TTY");
      return t && !strcmp(t, "1");
    }
  return isatty(STDOUT_FILENO);
}

/* log.metrics of a run that is not a resume, when the file exists (a previous run's): that file
 * is kept under the first free numbered name beside it (metrics.jsonl -> metrics.1.jsonl,
 * metrics.2.jsonl, ...: numbers grow with time, as Lightning's version_N) and the new run writes
 * the configured path, said in the run's first line. */
static int keep_previous_metrics(ts__progress *p, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return TS_OK;
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  size_t stem = dot && dot > (slash ? slash + 1 : path) ? (size_t)(dot - path) : strlen(path);
  char kept[1100];
  for (int n = 1; n < 100000; n++) {
    int k = snprintf(kept, sizeof kept, "%.*s.%d%s", (int)stem, path, n, path + stem);
    if (k < 0 || (size_t)k >= sizeof kept)
      return ts_error_set(TS_EIO, "log.metrics: '%s' exists and its path is too long to number", path);
    if (access(kept, F_OK) == 0) continue;
    if (rename(path, kept) != 0)
      return ts_error_set(TS_EIO, "log.metrics: '%s' exists (a previous run's) and cannot be kept as '%s': %s", path,
                          kept, strerror(errno));
    if (p->mode != TS_PROGRESS_OFF) {
      printf("metrics: %s (the previous run's kept as %s)\n", path, kept);
      fflush(stdout);
    } else {
      ts_log(TS_LOG_WARN, "log.metrics: %s exists (a previous run's): kept as %s", path, kept);
    }
    return TS_OK;
  }
  return ts_error_set(TS_EIO, "log.metrics: '%s' exists and so do 99999 numbered copies beside it", path);
}

int ts__progress_open(ts__progress *p, const ts_config *cfg, int64_t total_steps,
                      int64_t steps_per_epoch, int resumed) {
  memset(p, 0, sizeof *p);
  p->mode = cfg->log.progress;
  p->tty = stdout_is_terminal();
  p->columns = ts__terminal_columns(STDOUT_FILENO);
  if (p->mode == TS_PROGRESS_AUTO) p->mode = p->tty ? TS_PROGRESS_BAR : TS_PROGRESS_LINES;
  p->t_start = ts_time_now();
  p->total_steps = total_steps;
  p->steps_per_epoch = steps_per_epoch;
  p->epochs = steps_per_epoch > 0 ? (total_steps + steps_per_epoch - 1) / steps_per_epoch : 0;
  p->log_every = cfg->train.log_every > 0 ? cfg->train.log_every : 50;
  /* the folders of every output first: a path that cannot be made is refused before anything
   * is written (the previous metrics file still in its place) */
  if (cfg->log.plot[0]) { /* the curves are drawn at the end */
    int rc = ts__mkdir_parents(cfg->log.plot);
    if (rc) return ts_error_wrap(rc, "log.plot");
  }
  if (cfg->log.tensorboard[0]) {
    char probe[TS_CFG_PATH_MAX + 4];
    snprintf(probe, sizeof probe, "%s/x", cfg->log.tensorboard);
    int rc = ts__mkdir_parents(probe);
    if (rc) return ts_error_wrap(rc, "log.tensorboard");
  }
  if (cfg->log.metrics[0]) {
    snprintf(p->metrics_path, sizeof p->metrics_path, "%s", cfg->log.metrics);
    int rc = ts__mkdir_parents(cfg->log.metrics);
    if (rc) return ts_error_wrap(rc, "log.metrics");
    rc = resumed ? TS_OK : keep_previous_metrics(p, cfg->log.metrics);
    if (rc) return rc;
    p->metrics = fopen(cfg->log.metrics, resumed ? "a" : "w");
    if (!p->metrics)
      return ts_error_set(TS_EIO, "log.metrics: cannot open '%s' for writing: %s", cfg->log.metrics,
                          strerror(errno));
  }
  if (p->metrics) { /* the run's name and config first: `tessera plot` titles the curves with them */
    char title[256];
    ts__run_title(cfg, title, sizeof title);
    cJSON *o = cJSON_CreateObject();
    if (o) {
      cJSON_AddStringToObject(o, "type", "run");
      char name[128];
      ts__run_name(cfg, name, sizeof name);
      cJSON_AddStringToObject(o, "name", name);
      cJSON_AddStringToObject(o, "config", cfg->source[0] ? cfg->source : "");
      cJSON_AddStringToObject(o, "title", title);
    }
    int rc = write_record(p, o, 1);
    if (rc) return rc;
  }
  if (cfg->log.tensorboard[0]) {
    int rc = ts__tboard_open(&p->tb, cfg->log.tensorboard);
    if (rc) return rc;
  }
  return TS_OK;
}

int ts__terminal_columns(int fd) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char *e = getenv("COLUMNS");
  char *end;
  long c = e ? strtol(e, &end, 10) : 0;
  if (e && *e && !*end && c > 0 && c < 10000) return (int)c;
  return 80;
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

/* Metrics records go through cJSON: a number that is not finite (a diverging run's NaN loss) is
 * written as null and its key listed in the record's "nonfinite" array, so the file stays JSON. */
static void jnum(cJSON *o, const char *key, double v) {
  if (isfinite(v)) {
    cJSON_AddNumberToObject(o, key, v);
    return;
  }
  cJSON_AddNullToObject(o, key);
  cJSON *nf = cJSON_GetObjectItemCaseSensitive(o, "nonfinite");
  if (!nf) nf = cJSON_AddArrayToObject(o, "nonfinite");
  if (nf) cJSON_AddItemToArray(nf, cJSON_CreateString(key));
}
/* ms and seconds to the microsecond: the figures as before, not 17 digits */
static double r3(double v) { return isfinite(v) ? round(v * 1e3) / 1e3 : v; }

static int write_record(ts__progress *p, cJSON *o, int flush) {
  char *text = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!text) return ts_error_set(TS_ENOMEM, "log.metrics: out of memory writing a record");
  fputs(text, p->metrics);
  fputc('\n', p->metrics);
  free(text);
  return metrics_check(p, flush);
}

/* The "nonfinite" array goes last so that readers see the fields first. */
static void move_nonfinite_last(cJSON *o) {
  cJSON *nf = cJSON_DetachItemFromObjectCaseSensitive(o, "nonfinite");
  if (nf) cJSON_AddItemToObject(o, "nonfinite", nf);
}

int ts__progress_step(ts__progress *p, const ts_step_info *s) {
  int rc = TS_OK;
  /* every overflow is recorded (rare, and what a loss-scaling run is read for) */
  int logged = s->step % p->log_every == 0 || s->step == p->total_steps || s->step == 1 || s->overflow;
  if (p->metrics && logged) {
    cJSON *o = cJSON_CreateObject();
    if (o) {
      cJSON_AddStringToObject(o, "type", "step");
      cJSON_AddNumberToObject(o, "step", (double)s->step);
      cJSON_AddNumberToObject(o, "epoch", (double)s->epoch + 1); /* 1-based, as the console's */
      jnum(o, "loss", s->loss);
      jnum(o, "lr", s->lr);
      jnum(o, "grad_norm", s->grad_norm);
      jnum(o, "loss_scale", s->loss_scale);
      cJSON_AddNumberToObject(o, "overflow", s->overflow);
      jnum(o, "step_ms", r3(s->step_ms));
      jnum(o, "comm_wait_ms", r3(s->comm_wait_ms));
      jnum(o, "samples_per_s", round(s->samples_per_s * 10) / 10);
      if (s->pipelined) { /* this rank's schedule: idle time and blocked receives */
        jnum(o, "bubble_ms", r3(s->bubble_ms));
        jnum(o, "bubble_fraction", round(s->bubble_fraction * 1e4) / 1e4);
        jnum(o, "p2p_wait_ms", r3(s->p2p_wait_ms));
      }
      if (s->profiled) { /* log.profile: the step broken down */
        jnum(o, "data_ms", r3(s->data_ms));
        jnum(o, "forward_ms", r3(s->forward_ms));
        jnum(o, "backward_ms", r3(s->backward_ms));
        jnum(o, "optimizer_ms", r3(s->optimizer_ms));
        jnum(o, "comm_exposed_ms", r3(s->comm_exposed_ms));
      }
      cJSON_AddNumberToObject(o, "time_s", r3(ts_time_now() - p->t_start));
      move_nonfinite_last(o);
    }
    rc = write_record(p, o, 0);
  }
  if (!rc && p->tb.f && logged) {
    rc = ts__tboard_scalar(&p->tb, "train/loss", s->step, s->loss);
    if (!rc) rc = ts__tboard_scalar(&p->tb, "train/lr", s->step, s->lr);
    if (!rc) rc = ts__tboard_scalar(&p->tb, "train/grad_norm", s->step, s->grad_norm);
    if (!rc) rc = ts__tboard_scalar(&p->tb, "train/samples_per_s", s->step, s->samples_per_s);
    if (!rc && s->loss_scale != 1) rc = ts__tboard_scalar(&p->tb, "train/loss_scale", s->step, s->loss_scale);
  }
  if (rc || p->mode == TS_PROGRESS_OFF) return rc;
  double now = ts_time_now(), el = now - p->t_start;
  char eta[32];
  fmt_time(eta, sizeof eta, s->samples_per_s > 0 ? (double)(p->total_steps - s->step) * s->step_ms / 1e3 : 0);
  if (p->mode == TS_PROGRESS_BAR) {
    if (now - p->last_print < 0.1 && s->step != p->total_steps) return TS_OK;
    p->last_print = now;
    int64_t in_ep = p->steps_per_epoch ? (s->step - 1) % p->steps_per_epoch + 1 : s->step;
    double frac = p->steps_per_epoch ? (double)in_ep / (double)p->steps_per_epoch : 0;
    char line[512];
    ts__progress_bar_line(line, sizeof line, p->columns, s->epoch + 1, p->epochs, frac, in_ep,
                          p->steps_per_epoch, s->loss, s->samples_per_s, eta);
    printf("\r\033[K%s", line);
    fflush(stdout);
    p->bar_open = 1;
  } else if (s->step % p->log_every == 0 || s->step == p->total_steps) {
    char t[32];
    fmt_time(t, sizeof t, el);
    printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.0f samples/s  %.1f ms/step  [%s, eta %s]\n",
           (long long)s->step, (long long)p->total_steps, (long long)s->epoch + 1, s->loss, s->lr,
           s->samples_per_s, s->step_ms, t, eta);
    fflush(stdout);
  }
  return TS_OK;
}

/* The bar's line: "epoch E/N [====>   ] i/n  loss L  S samples/s  eta T", the bar shrunk (down
 * to 10 cells), then throughput, the bar, eta and loss dropped in that order until it fits in
 * `columns` less one (the cursor's cell: a full line would wrap on some terminals). */
void ts__progress_bar_line(char *out, size_t cap, int columns, int64_t epoch, int64_t epochs, double frac,
                           int64_t in_ep, int64_t per_epoch, double loss, double samples_per_s, const char *eta) {
  char head[64], count[64], tail[3][64];
  snprintf(head, sizeof head, "epoch %lld/%lld", (long long)epoch, (long long)epochs);
  snprintf(count, sizeof count, " %lld/%lld", (long long)in_ep, (long long)per_epoch);
  snprintf(tail[0], sizeof tail[0], "  loss %.4f", loss);
  snprintf(tail[1], sizeof tail[1], "  eta %s", eta);
  snprintf(tail[2], sizeof tail[2], "  %.0f samples/s", samples_per_s);
  int avail = columns - 1;
  if (avail < 20) avail = 20;
  int fixed = (int)(strlen(head) + strlen(count));
  /* what goes first when space is short: throughput, then the bar, then eta, then loss */
  int keep = 3, with_bar = 1, tl = 0;
  for (;;) {
    tl = 0;
    for (int k = 0; k < keep; k++) tl += (int)strlen(tail[k]);
    if (fixed + (with_bar ? 13 : 0) + tl <= avail || (keep == 0 && !with_bar)) break;
    if (keep == 3) keep = 2;
    else if (with_bar) with_bar = 0;
    else keep--;
  }
  int cells = with_bar ? avail - fixed - tl - 3 : 0; /* " [" and "]" */
  if (cells > 30) cells = 30;
  char bar[40] = "";
  if (cells >= 10) {
    int fill = (int)(frac * cells);
    bar[0] = ' ';
    bar[1] = '[';
    for (int i = 0; i < cells; i++) bar[2 + i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[2 + cells] = ']';
    bar[3 + cells] = 0;
  }
  /* the order on screen: head bar count loss throughput eta */
  snprintf(out, cap, "%s%s%s%s%s%s", head, bar, count, keep > 0 ? tail[0] : "", keep > 2 ? tail[2] : "",
           keep > 1 ? tail[1] : "");
  if ((int)strlen(out) > avail) out[avail] = 0;
}

int ts__progress_eval(ts__progress *p, const ts_eval_info *e) {
  int rc = TS_OK;
  if (p->metrics) {
    cJSON *o = cJSON_CreateObject();
    if (o) {
      cJSON_AddStringToObject(o, "type", "eval");
      cJSON_AddNumberToObject(o, "step", (double)e->step);
      cJSON_AddNumberToObject(o, "epoch", (double)e->epoch + 1);
      cJSON_AddNumberToObject(o, "samples", (double)e->samples);
      jnum(o, "loss", e->loss);
      jnum(o, "top1", e->top1);
      jnum(o, "top5", e->top5);
      jnum(o, "eval_s", r3(e->seconds));
      cJSON_AddNumberToObject(o, "time_s", r3(ts_time_now() - p->t_start));
      move_nonfinite_last(o);
    }
    rc = write_record(p, o, 1);
  }
  if (!rc && p->tb.f) {
    rc = ts__tboard_scalar(&p->tb, "eval/loss", e->step, e->loss);
    if (!rc) rc = ts__tboard_scalar(&p->tb, "eval/top1", e->step, e->top1);
    if (!rc) rc = ts__tboard_scalar(&p->tb, "eval/top5", e->step, e->top5);
    if (!rc) rc = ts__tboard_flush(&p->tb);
  }
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
  cJSON *o = cJSON_Parse(json); /* a record that is not JSON is a bug upstream: said, not written */
  if (!o) return ts_error_set(TS_EINVAL, "log.metrics: a record is not JSON: %.60s", json);
  return write_record(p, o, 1);
}

int ts__progress_end(ts__progress *p, int64_t steps, double final_loss, double test_acc, int have_acc,
                     const char *extra, int64_t ran, int64_t applied) {
  double wall = ts_time_now() - p->t_start;
  /* a resume at the run's end trained nothing: no loss of its own (a checkpoint records none) */
  char note[300] = "";
  if (ran == 0)
    snprintf(note, sizeof note, "nothing trained: the checkpoint resumed is at the run's end (step %lld); it records "
             "no loss", (long long)steps);
  else if (applied == 0)
    snprintf(note, sizeof note, "warning: no step was applied: all %lld overflowed and were skipped (parameters as "
             "they started; lower train.loss_scale_value or use train.loss_scale dynamic)", (long long)ran);
  int rc = TS_OK;
  if (p->metrics) {
    /* extra is fields with trailing commas: parsed as an object, its members appended */
    size_t el = extra ? strlen(extra) : 0;
    char *ex = malloc(el + 8);
    cJSON *o = cJSON_CreateObject(), *xo = NULL;
    if (ex) {
      snprintf(ex, el + 8, "{%s\"_\":0}", extra ? extra : "");
      xo = cJSON_Parse(ex);
      free(ex);
    }
    if (o) {
      cJSON_AddStringToObject(o, "type", "end");
      cJSON_AddNumberToObject(o, "steps", (double)steps);
      cJSON_AddNumberToObject(o, "steps_run", (double)ran);
      cJSON_AddNumberToObject(o, "steps_applied", (double)applied);
      if (ran > 0) jnum(o, "final_loss", final_loss);
      if (have_acc) jnum(o, "test_accuracy", test_acc);
      for (cJSON *it = xo ? xo->child : NULL; it;) {
        cJSON *next = it->next;
        if (strcmp(it->string, "_")) cJSON_AddItemToObject(o, it->string, cJSON_DetachItemViaPointer(xo, it));
        it = next;
      }
      cJSON_AddNumberToObject(o, "wall_s", r3(wall));
      move_nonfinite_last(o);
    }
    cJSON_Delete(xo);
    rc = write_record(p, o, 1);
  }
  if (!rc) rc = ts__tboard_flush(&p->tb);
  if (!rc && p->mode == TS_PROGRESS_OFF && note[0]) ts_log(TS_LOG_WARN, "%s", note);
  if (rc || p->mode == TS_PROGRESS_OFF) return rc;
  clear_bar(p);
  if (ran == 0)
    printf("done: %s\n", note);
  else if (note[0] && have_acc)
    printf("done: %lld steps in %.1f s, final loss %.4f, test accuracy %.2f%%; %s\n", (long long)steps, wall,
           final_loss, 100 * test_acc, note);
  else if (note[0])
    printf("done: %lld steps in %.1f s, final loss %.4f; %s\n", (long long)steps, wall, final_loss, note);
  else if (have_acc)
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
  ts__tboard_close(&p->tb);
}
