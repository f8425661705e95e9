/* TensorBoard scalars (log.tensorboard: DIR): an event file written directly, no protobuf library.
 * The file is TFRecord framing around serialized `tensorflow.Event` messages:
 *   uint64 length (little endian), uint32 masked CRC32C of those 8 bytes, the payload,
 *   uint32 masked CRC32C of the payload;  masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
 * The first event carries file_version "brain.Event:2"; each scalar is an Event with wall_time
 * (field 1, double), step (field 2, varint) and summary (field 5) holding one
 * Summary.Value { tag (1, string), simple_value (2, float) }. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tessera/base.h"
#include "base/afile.h"
#include "train_impl.h"

uint32_t ts__crc32c(const void *data, size_t n) {
  static uint32_t table[256];
  static int ready;
  if (!ready) { /* Castagnoli polynomial, reflected */
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t ts__crc32c_masked(const void *data, size_t n) {
  uint32_t c = ts__crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* protobuf encoding into a small fixed buffer (events here are well under 1 KiB) */
typedef struct { unsigned char b[1024]; size_t n; } pbuf;

static void pb_varint(pbuf *p, uint64_t v) {
  while (v >= 0x80 && p->n < sizeof p->b) { p->b[p->n++] = (unsigned char)(v | 0x80); v >>= 7; }
  if (p->n < sizeof p->b) p->b[p->n++] = (unsigned char)v;
}
static void pb_raw(pbuf *p, const void *d, size_t n) {
  if (p->n + n > sizeof p->b) n = sizeof p->b - p->n;
  memcpy(p->b + p->n, d, n);
  p->n += n;
}
static void pb_le(pbuf *p, uint64_t v, int bytes) {
  unsigned char b[8];
  for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
  pb_raw(p, b, (size_t)bytes);
}
static void pb_double(pbuf *p, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  pb_varint(p, (uint64_t)field << 3 | 1);
  pb_le(p, u, 8);
}
static void pb_float(pbuf *p, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  pb_varint(p, (uint64_t)field << 3 | 5);
  pb_le(p, u, 4);
}
static void pb_bytes(pbuf *p, int field, const void *d, size_t n) {
  pb_varint(p, (uint64_t)field << 3 | 2);
  pb_varint(p, n);
  pb_raw(p, d, n);
}

static int write_record(ts__tboard *tb, const pbuf *ev) {
  unsigned char hdr[12];
  uint64_t len = ev->n;
  for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)(len >> (8 * i));
  uint32_t c = ts__crc32c_masked(hdr, 8);
  for (int i = 0; i < 4; i++) hdr[8 + i] = (unsigned char)(c >> (8 * i));
  uint32_t d = ts__crc32c_masked(ev->b, ev->n);
  unsigned char tail[4];
  for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(d >> (8 * i));
  if (fwrite(hdr, 1, 12, tb->f) != 12 || fwrite(ev->b, 1, ev->n, tb->f) != ev->n || fwrite(tail, 1, 4, tb->f) != 4) {
    int e = errno;
    return ts_error_set(TS_EIO, "log.tensorboard: writing '%s' failed: %s", tb->path, e ? strerror(e) : "write error");
  }
  return TS_OK;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ts__tboard_open(ts__tboard *tb, const char *dir) {
  memset(tb, 0, sizeof *tb);
  char probe[sizeof tb->path];
  snprintf(probe, sizeof probe, "%s/x", dir);
  int rc = ts__mkdir_parents(probe);
  if (rc) return ts_error_wrap(rc, "log.tensorboard");
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return ts_error_set(TS_EIO, "log.tensorboard: cannot create the folder '%s': %s", dir, strerror(errno));
  char host[128] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  double now = wall_now();
  /* TensorBoard's own naming: events.out.tfevents.<seconds>.<host>; the pid keeps two runs apart */
  int n = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)now, host,
                   (int)getpid());
  if (n < 0 || (size_t)n >= sizeof tb->path)
    return ts_error_set(TS_EINVAL, "log.tensorboard: folder name too long: '%s'", dir);
  tb->f = fopen(tb->path, "wb");
  if (!tb->f) return ts_error_set(TS_EIO, "log.tensorboard: cannot create '%s': %s", tb->path, strerror(errno));
  pbuf ev = {.n = 0};
  pb_double(&ev, 1, now);
  pb_bytes(&ev, 3, "brain.Event:2", 13); /* file_version */
  rc = write_record(tb, &ev);
  if (!rc && fflush(tb->f)) rc = ts_error_set(TS_EIO, "log.tensorboard: writing '%s' failed: %s", tb->path, strerror(errno));
  if (rc) ts__tboard_close(tb);
  return rc;
}

int ts__tboard_scalar(ts__tboard *tb, const char *tag, int64_t step, double value) {
  if (!tb->f) return TS_OK;
  size_t tl = strnlen(tag, 256);
  pbuf val = {.n = 0}, sum = {.n = 0}, ev = {.n = 0};
  pb_bytes(&val, 1, tag, tl);
  pb_float(&val, 2, (float)value); /* NaN and inf are floats too: TensorBoard shows them as such */
  pb_bytes(&sum, 1, val.b, val.n);
  pb_double(&ev, 1, wall_now());
  pb_varint(&ev, 2 << 3 | 0);
  pb_varint(&ev, (uint64_t)step);
  pb_bytes(&ev, 5, sum.b, sum.n);
  return write_record(tb, &ev);
}

int ts__tboard_flush(ts__tboard *tb) {
  if (tb->f && fflush(tb->f))
    return ts_error_set(TS_EIO, "log.tensorboard: writing '%s' failed: %s", tb->path, strerror(errno));
  return TS_OK;
}

void ts__tboard_close(ts__tboard *tb) {
  if (tb->f) fclose(tb->f);
  tb->f = NULL;
}
