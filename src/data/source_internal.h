/* Private helpers shared by the built-in data sources (source.c, idx.c, cifar.c, image_folder.c,
 * records.c, records_write.c, text.c). Not installed. */
#ifndef TS_DATA_SOURCE_INTERNAL_H
#define TS_DATA_SOURCE_INTERNAL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/data.h"
#include "../base/rfile.h"

/* A whole file mapped read-only (data NULL for an empty file). */
typedef struct {
  const uint8_t *data;
  size_t size;
} ts__mapped;

/* Maps path read-only; errors name the file (TS_ENOTFOUND if missing). */
int ts__map_file(const char *path, ts__mapped *m);
void ts__unmap_file(ts__mapped *m);
/* The object behind a source and its table (for a built-in source's own accessors, which check
 * vt->get is theirs before touching self). */
void *ts__source_self(const ts_source *s, const ts_source_vtable **vt);

static inline uint32_t ts__rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ts__rd64(const uint8_t *p) { return (uint64_t)ts__rd32(p) | (uint64_t)ts__rd32(p + 4) << 32; }
static inline void ts__wr32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}
static inline void ts__wr64(uint8_t *p, uint64_t v) {
  ts__wr32(p, (uint32_t)v);
  ts__wr32(p + 4, (uint32_t)(v >> 32));
}

/* ---- Tessera record shards (docs/data.md has the full spec) ----
 * header (TSR_HEADER bytes, little-endian):
 *   0 magic "TSREC\0\0\1" | 8 u32 version | 12 u32 header size | 16 u64 records in this file
 *   24 u64 records in the whole set | 32 u32 shard index | 36 u32 shard count | 40 u64 index offset
 *   48 u64 file size | 56 u32 number of classes | 60 char[16] source kind | 76 u32 CRC32 of [0,76)
 * record (8-aligned): 0 i64 label | 8 u32 length L (to the end of the CRC) | 12 u32 tensor count
 *   (1 = data, 2 = data + target), then per tensor: u8 dtype, u8 ndim, u16 0, u32 0, ndim x i64 dims,
 *   u64 byte count, the bytes, zeros to a multiple of 8; then u32 CRC32 of [0, L-4); zeros to 8.
 * index (at the index offset): per record u64 offset, i64 label; then u32 CRC32 of the entries. */
#define TSR_MAGIC "TSREC\0\0\1"
#define TSR_VERSION 1
#define TSR_HEADER 80
#define TSR_REC_MIN 20 /* record header + CRC, without any tensor */

#endif
