/* libFuzzer target for the record shard reader: bytes -> a temporary .tsr file -> open it alone
 * (ts_source_records_shard), as a set (ts_source_records) and through ts_records_info_read, then
 * read every record and label. Every failure must be a clean error, never a crash or a leak.
 *
 * Checksums would stop almost every mutation at the first CRC, so when the first input byte is odd
 * the harness first recomputes the header CRC, the index CRC and the CRC of every record the index
 * points at (the reader itself is unchanged): that way the parsing behind the CRCs gets fuzzed
 * too. The rest of the input is the file. Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tessera/data.h"

static char g_path[128];

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crcs(uint8_t *d, size_t n) {
  if (n < 80) return;
  uint64_t count = rd64(d + 16), io = rd64(d + 40);
  if (io <= n && n - io >= 4 && (n - io - 4) / 16 >= count) {
    for (uint64_t r = 0; r < count; r++) {
      uint64_t o = rd64(d + io + 16 * r);
      if (o < n && n - o >= 16) {
        uint32_t L = rd32(d + o + 8);
        if (L >= 20 && L <= n - o) wr32(d + o + L - 4, (uint32_t)crc32(0, d + o, L - 4));
      }
    }
    wr32(d + io + 16 * count, (uint32_t)crc32(0, d + io, (uInt)(16 * count)));
  }
  wr32(d + 76, (uint32_t)crc32(0, d, 76));
}

static void drain(ts_source *s) {
  int64_t n = ts_source_len(s);
  for (int64_t i = 0; i < n; i++) {
    ts_sample smp;
    if (ts_source_get(s, i, &smp) == TS_OK) ts_sample_free(&smp);
    (void)ts_source_label(s, i);
  }
  (void)ts_source_num_classes(s);
  ts_source_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    snprintf(g_path, sizeof g_path, "%s/ts_fuzz_records_%d.tsr", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
  }
  if (size < 1) return 0;
  size_t n = size - 1;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return 0;
  memcpy(buf, data + 1, n);
  if (data[0] & 1) fix_crcs(buf, n);
  FILE *f = fopen(g_path, "wb");
  if (!f) {
    free(buf);
    return 0;
  }
  fwrite(buf, 1, n, f);
  fclose(f);
  free(buf);
  ts_source *s;
  if (ts_source_records_shard(g_path, &s) == TS_OK) drain(s);
  const char *paths[1] = {g_path};
  if (ts_source_records(paths, 1, &s) == TS_OK) drain(s);
  ts_records_info info;
  (void)ts_records_info_read(g_path, &info);
  unlink(g_path); /* libFuzzer may end the process without running atexit handlers */
  return 0;
}
