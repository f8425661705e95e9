/* Reading user-given files (see rfile.h). */
#include "rfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/base.h"

static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "is a directory";
  if (S_ISFIFO(m)) return "is a FIFO, not a regular file";
  if (S_ISCHR(m)) return "is a character device, not a regular file";
  if (S_ISBLK(m)) return "is a block device, not a regular file";
  if (S_ISSOCK(m)) return "is a socket, not a regular file";
  return "is not a regular file";
}

int ts__file_open_read(const char *path, const char *what, int *fd_out, uint64_t *size_out) {
  *fd_out = -1;
  if (!what) what = "cannot open";
  if (!path) return ts_error_set(TS_EINVAL, "(null path): %s", what);
  /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return ts_error_set(e == ENOENT ? TS_ENOTFOUND : TS_EIO, "%s: %s: %s", path, what, strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ts_error_set(TS_EIO, "%s: %s: cannot stat: %s", path, what, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return ts_error_set(TS_EIO, "%s: %s: %s", path, what, file_kind(st.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return ts_error_set(TS_EIO, "%s: %s: %s", path, what, strerror(e));
  }
  *fd_out = fd;
  if (size_out) *size_out = (uint64_t)st.st_size;
  return TS_OK;
}

int ts__file_fopen_read(const char *path, const char *what, FILE **out) {
  *out = NULL;
  int fd;
  int rc = ts__file_open_read(path, what, &fd, NULL);
  if (rc) return rc;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return ts_error_set(e == ENOMEM ? TS_ENOMEM : TS_EIO, "%s: %s: %s", path, what ? what : "cannot open",
                        strerror(e));
  }
  *out = f;
  return TS_OK;
}

int ts__read_full(int fd, void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? -2 : -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int ts__file_read_all(const char *path, const char *what, char **buf_out, size_t *len_out) {
  *buf_out = NULL;
  if (len_out) *len_out = 0;
  int fd;
  uint64_t size;
  int rc = ts__file_open_read(path, what, &fd, &size);
  if (rc) return rc;
  if (size > (uint64_t)SIZE_MAX - 1) {
    close(fd);
    return ts_error_set(TS_ENOMEM, "%s: %llu bytes do not fit in memory", path, (unsigned long long)size);
  }
  /* the size is a hint: read to the end, growing if the file grew */
  size_t cap = (size_t)size + 1, n = 0;
  char *b = malloc(cap);
  if (!b) {
    close(fd);
    return ts_error_set(TS_ENOMEM, "%s: out of memory reading %zu bytes", path, cap);
  }
  for (;;) {
    char probe;
    int full = n + 1 == cap; /* full: one byte more means the file grew */
    ssize_t r = full ? read(fd, &probe, 1) : read(fd, b + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(b);
      close(fd);
      return ts_error_set(TS_EIO, "%s: read failed after %zu bytes: %s", path, n, strerror(e));
    }
    if (r == 0) break;
    if (full) {
      char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
      if (!nb) {
        free(b);
        close(fd);
        return ts_error_set(TS_ENOMEM, "%s: out of memory reading more than %zu bytes", path, n);
      }
      b = nb;
      cap *= 2;
      b[n] = probe;
    }
    n += (size_t)r;
  }
  close(fd);
  b[n] = 0;
  *buf_out = b;
  if (len_out) *len_out = n;
  return TS_OK;
}
