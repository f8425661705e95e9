/* TESSERA_FAULT: faults `tessera train` causes itself, for the tests of restarts (fault.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "tessera/checkpoint.h"

static const char *const kinds[] = {"kill", "hang", "slow", "corrupt_ckpt"};

/* A decimal integer in [lo, hi] spanning the whole of s. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int ts__faults_parse(const char *spec, ts__faults *out) {
  memset(out, 0, sizeof *out);
  const char *r = getenv("TESSERA_RESTART");
  out->armed = !r || !*r || !strcmp(r, "0");
  if (!spec || !*spec) return TS_OK;
  char buf[2048];
  if (strlen(spec) >= sizeof buf) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: longer than %zu characters", sizeof buf - 1);
  snprintf(buf, sizeof buf, "%s", spec);
  int entry = 0;
  char *save_e = NULL;
  for (char *e = strtok_r(buf, ";", &save_e); e; e = strtok_r(NULL, ";", &save_e)) {
    while (*e == ' ') e++;
    if (!*e) continue;
    entry++;
    if (out->n == TS__FAULT_MAX) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: more than %d faults", TS__FAULT_MAX);
    ts__fault f = {-1, -1, -1, 1.0};
    int have_secs = 0;
    char *save_f = NULL;
    for (char *kv = strtok_r(e, ",", &save_f); kv; kv = strtok_r(NULL, ",", &save_f)) {
      while (*kv == ' ') kv++;
      char *colon = strchr(kv, ':');
      if (!colon) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: '%s' is not key:value (rank:R,step:S,kind:K)", entry, kv);
      *colon = 0;
      const char *k = kv, *v = colon + 1;
      int64_t x;
      if (!strcmp(k, "rank")) {
        if (parse_i64(v, 0, 1 << 30, &x)) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: rank '%s' is not a rank number", entry, v);
        f.rank = (int)x;
      } else if (!strcmp(k, "step")) {
        if (parse_i64(v, 1, INT64_MAX / 2, &x)) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: step '%s' is not a step number (1 or more)", entry, v);
        f.step = x;
      } else if (!strcmp(k, "kind")) {
        for (int i = 0; i < 4; i++)
          if (!strcmp(v, kinds[i])) f.kind = i;
        if (f.kind < 0) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: kind '%s' is not kill, hang, slow or corrupt_ckpt", entry, v);
      } else if (!strcmp(k, "secs")) {
        char *end = NULL;
        double s = strtod(v, &end);
        if (!*v || *end || !(s > 0 && s <= 3600)) return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: secs '%s' is not a number of seconds in (0, 3600]", entry, v);
        f.secs = s;
        have_secs = 1;
      } else {
        return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: unknown key '%s' (rank, step, kind, secs)", entry, k);
      }
    }
    if (f.rank < 0 || f.step < 0 || f.kind < 0)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d lacks %s (rank:R,step:S,kind:kill|hang|slow|corrupt_ckpt)", entry,
                          f.rank < 0 ? "rank" : f.step < 0 ? "step" : "kind");
    if (have_secs && f.kind != TS__FAULT_SLOW)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d: secs is for kind slow, not %s", entry, kinds[f.kind]);
    out->f[out->n++] = f;
  }
  return TS_OK;
}

/* Flips 16 bytes in the middle of the data section of the safetensors file at path. */
static int corrupt(const char *path) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return ts_error_set(TS_EIO, "TESSERA_FAULT: corrupt_ckpt: cannot open %s: %s", path, strerror(errno));
  unsigned char h[8], b[16];
  struct stat st;
  int rc = TS_OK;
  if (pread(fd, h, 8, 0) != 8 || fstat(fd, &st) != 0) {
    rc = ts_error_set(TS_EIO, "TESSERA_FAULT: corrupt_ckpt: cannot read %s", path);
  } else {
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | h[i];
    uint64_t size = (uint64_t)st.st_size, data = 8 + hl;
    if (hl > size || data + sizeof b > size) {
      rc = ts_error_set(TS_EIO, "TESSERA_FAULT: corrupt_ckpt: %s has no data section of 16 bytes", path);
    } else {
      off_t off = (off_t)(data + (size - data - sizeof b) / 2);
      if (pread(fd, b, sizeof b, off) != (ssize_t)sizeof b) rc = ts_error_set(TS_EIO, "TESSERA_FAULT: cannot read %s", path);
      for (size_t i = 0; i < sizeof b; i++) b[i] ^= 0xff;
      if (!rc && (pwrite(fd, b, sizeof b, off) != (ssize_t)sizeof b || fsync(fd) != 0))
        rc = ts_error_set(TS_EIO, "TESSERA_FAULT: cannot write %s: %s", path, strerror(errno));
      if (!rc) ts_log(TS_LOG_WARN, "TESSERA_FAULT: flipped 16 bytes at offset %lld of %s", (long long)off, path);
    }
  }
  close(fd);
  return rc;
}

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int on_step(ts_trainer *t, const ts_step_info *s, void *user) {
  (void)t;
  ts__faults *fs = user;
  for (int i = 0; i < fs->n; i++) {
    const ts__fault *f = &fs->f[i];
    if (f->rank != fs->rank) continue;
    if (f->kind == TS__FAULT_KILL && s->step == f->step) {
      ts_log(TS_LOG_WARN, "TESSERA_FAULT: killing rank %d (SIGKILL) at the end of step %lld", fs->rank, (long long)s->step);
      fflush(stdout);
      raise(SIGKILL);
    } else if (f->kind == TS__FAULT_HANG && s->step == f->step) {
      ts_log(TS_LOG_WARN, "TESSERA_FAULT: rank %d hangs at the end of step %lld", fs->rank, (long long)s->step);
      fflush(stdout);
      for (;;) nap(3600);
    } else if (f->kind == TS__FAULT_SLOW && s->step >= f->step) {
      nap(f->secs);
    } else if (f->kind == TS__FAULT_CORRUPT_CKPT && s->step == f->step + 1) {
      char path[2300], dir[2200];
      struct stat sb;
      int rc = ts_ckpt_path(path, sizeof path, fs->dir, fs->prefix, f->step);
      /* a sliced checkpoint (a folder): this rank's file, else the lowest rank's there is */
      if (!rc && stat(path, &sb) != 0 && !(rc = ts_ckpt_dir_path(dir, sizeof dir, fs->dir, fs->prefix, f->step)) &&
          stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(path, sizeof path, "%s/rank%05d.safetensors", dir, fs->rank);
        for (int r = 0; r < 65536 && stat(path, &sb) != 0; r++)
          snprintf(path, sizeof path, "%s/rank%05d.safetensors", dir, r);
      }
      if (!rc) rc = corrupt(path);
      if (rc) return rc;
    }
  }
  return TS_OK;
}

int ts__faults_install(ts__faults *fs, ts_trainer *t, const ts_config *cfg) {
  if (!fs->n || !fs->armed) return TS_OK;
  int size = ts_trainer_world_size(t);
  int64_t spe = ts_trainer_steps_per_epoch(t), total = ts_config_total_steps(cfg, spe);
  fs->rank = ts_trainer_rank(t);
  snprintf(fs->dir, sizeof fs->dir, "%s", cfg->checkpoint.dir);
  snprintf(fs->prefix, sizeof fs->prefix, "%s", cfg->checkpoint.prefix);
  for (int i = 0; i < fs->n; i++) {
    const ts__fault *f = &fs->f[i];
    const char *k = kinds[f->kind];
    if (f->rank >= size)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d (%s) is for rank %d, but the job has %d rank%s", i + 1, k,
                          f->rank, size, size == 1 ? "" : "s");
    if (f->step > total)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d (%s) is at step %lld, but the job ends at step %lld", i + 1,
                          k, (long long)f->step, (long long)total);
    if (f->kind != TS__FAULT_CORRUPT_CKPT) continue;
    const ts_config *c = cfg;
    int epoch_end = spe > 0 && f->step % spe == 0;
    int saved = c->checkpoint.dir[0] &&
                ((c->checkpoint.save_steps > 0 && f->step % c->checkpoint.save_steps == 0) ||
                 (c->checkpoint.save_steps <= 0 && c->checkpoint.save_epochs > 0 && epoch_end &&
                  (f->step / spe) % c->checkpoint.save_epochs == 0));
    if (!saved)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d (corrupt_ckpt) at step %lld: no checkpoint is written at "
                          "that step (checkpoint.dir, checkpoint.save_steps)", i + 1, (long long)f->step);
    if (f->step >= total)
      return ts_error_set(TS_ECONFIG, "TESSERA_FAULT: fault %d (corrupt_ckpt) at step %lld: it fires at the end of the "
                          "next step, and the job ends at step %lld", i + 1, (long long)f->step, (long long)total);
  }
  ts_callback cb = {"fault_injection", on_step, NULL, NULL, NULL, fs};
  return ts_trainer_add_callback(t, &cb);
}
