/* Atomic file writes (see afile.h). */
#include "afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "iofault.h"
#include "tessera/base.h"

struct ts__afile {
  int fd;
  char *path, *tmp;
};

static void afile_free(ts__afile *f) {
  free(f->path);
  free(f->tmp);
  free(f);
}

int ts__afile_open(const char *path, ts__afile **out) {
  static atomic_uint counter;
  *out = NULL;
  ts__afile *f = calloc(1, sizeof *f);
  size_t tl = strlen(path) + 48;
  if (f) {
    f->path = strdup(path);
    f->tmp = malloc(tl);
  }
  if (!f || !f->path || !f->tmp) {
    if (f) afile_free(f);
    return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  }
  f->fd = -1;
  for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
    snprintf(f->tmp, tl, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f->fd < 0 && errno != EEXIST) break;
  }
  if (f->fd < 0) {
    int rc = ts_error_set(TS_EIO, "%s: cannot create temporary file %s: %s", path, f->tmp, strerror(errno));
    afile_free(f);
    return rc;
  }
  *out = f;
  return TS_OK;
}

int ts__afile_write(ts__afile *f, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = ts__io_fault("write", f->tmp) ? -1 : write(f->fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return ts_error_set(TS_EIO, "%s: write failed: %s", f->path, strerror(errno));
    }
    p += k;
    n -= (size_t)k;
  }
  return TS_OK;
}

void ts__afile_abort(ts__afile *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  unlink(f->tmp);
  afile_free(f);
}

int ts__afile_commit(ts__afile *f) {
  int bad = ts__io_fault("fsync", f->tmp) || fsync(f->fd) != 0;
  int e = errno;
  if (close(f->fd) != 0 && !bad) bad = 1, e = errno;
  f->fd = -1;
  if (!bad && (ts__io_fault("rename", f->path) || rename(f->tmp, f->path) != 0)) bad = 1, e = errno;
  if (bad) {
    int rc = ts_error_set(TS_EIO, "%s: write failed: %s", f->path, strerror(e));
    ts__afile_abort(f);
    return rc;
  }
  /* make the rename durable; failure here does not undo a complete write */
  char *slash = strrchr(f->path, '/');
  const char *d = ".";
  if (slash) {
    slash[slash == f->path ? 1 : 0] = 0;
    d = f->path;
  }
  int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (!ts__io_fault("fsync_dir", d)) (void)fsync(dfd);
    close(dfd);
  }
  afile_free(f);
  return TS_OK;
}

int ts__mkdir_parents(const char *path) {
  char *d = strdup(path);
  if (!d) return ts_error_set(TS_ENOMEM, "%s: out of memory", path);
  char *slash = strrchr(d, '/');
  if (!slash || slash == d) {
    free(d);
    return TS_OK;
  }
  *slash = 0;
  for (char *p = d + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(d, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        int rc = ts_error_set(TS_EIO, "%s: cannot create directory %s: %s", path, d, strerror(e));
        free(d);
        return rc;
      }
      *p = c;
      if (!c) break;
    }
  }
  free(d);
  return TS_OK;
}
