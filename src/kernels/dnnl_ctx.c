#include "dnnl_ctx.h"

#include <stdlib.h>
#include <string.h>

#include "tessera/tensor.h"
#include "../base/text.h"

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;

dnnl_engine_t ts__dnnl_engine(void) {
  if (!g_engine && dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
  return g_engine;
}

dnnl_stream_t ts__dnnl_stream(void) {
  if (!g_stream && ts__dnnl_engine() &&
      dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success)
    g_stream = NULL;
  return g_stream;
}

typedef struct {
  unsigned char *key;
  size_t keylen;
  uint64_t hash;
  ts__dnnl_prim *p; /* heap-allocated so pointers handed out stay valid when the table grows */
} entry;

static entry *g_tab;
static size_t g_cap, g_n;

static uint64_t hash_bytes(const void *k, size_t n) {
  return ts__fnv1a(TS__FNV1A_BASIS, k, n) | 1; /* 0 marks an empty slot */
}

static entry *find_slot(entry *tab, size_t cap, const void *key, size_t keylen, uint64_t h) {
  size_t i = h & (cap - 1);
  for (;;) {
    entry *e = &tab[i];
    if (e->hash == 0) return e;
    if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0) return e;
    i = (i + 1) & (cap - 1);
  }
}

ts__dnnl_prim *ts__dnnl_cache_get(const void *key, size_t keylen) {
  if (!g_tab) return NULL;
  entry *e = find_slot(g_tab, g_cap, key, keylen, hash_bytes(key, keylen));
  return e->hash ? e->p : NULL;
}

static int grow(void) {
  size_t ncap = g_cap ? g_cap * 2 : 256;
  entry *nt = calloc(ncap, sizeof(entry));
  if (!nt) return -1;
  for (size_t i = 0; i < g_cap; i++)
    if (g_tab[i].hash) *find_slot(nt, ncap, g_tab[i].key, g_tab[i].keylen, g_tab[i].hash) = g_tab[i];
  free(g_tab);
  g_tab = nt;
  g_cap = ncap;
  return 0;
}

ts__dnnl_prim *ts__dnnl_cache_put(const void *key, size_t keylen, dnnl_primitive_desc_t pd,
                                  dnnl_primitive_t prim, void *aux) {
  if ((g_n + 1) * 2 > g_cap && grow() != 0) return NULL;
  uint64_t h = hash_bytes(key, keylen);
  entry *e = find_slot(g_tab, g_cap, key, keylen, h);
  if (e->hash) { /* replace in place: the entry pointer stays the same */
    if (e->p->prim) dnnl_primitive_destroy(e->p->prim);
    if (e->p->pd) dnnl_primitive_desc_destroy(e->p->pd);
    free(e->p->aux);
  } else {
    e->key = malloc(keylen ? keylen : 1);
    e->p = calloc(1, sizeof *e->p);
    if (!e->key || !e->p) {
      free(e->key);
      free(e->p);
      e->key = NULL;
      e->p = NULL;
      return NULL;
    }
    memcpy(e->key, key, keylen);
    e->keylen = keylen;
    e->hash = h;
    g_n++;
  }
  e->p->pd = pd;
  e->p->prim = prim;
  e->p->aux = aux;
  return e->p;
}

ts__dnnl_prim *ts__dnnl_cache_put_pd(const void *key, size_t keylen, dnnl_primitive_desc_t pd) {
  dnnl_primitive_t prim = NULL;
  if (dnnl_primitive_create(&prim, pd) != dnnl_success) {
    dnnl_primitive_desc_destroy(pd);
    ts_error_set(TS_EBACKEND, "oneDNN: primitive creation failed");
    return NULL;
  }
  ts__dnnl_prim *p = ts__dnnl_cache_put(key, keylen, pd, prim, NULL);
  if (!p) ts_error_set(TS_ENOMEM, "oneDNN primitive cache: out of memory");
  return p;
}

void ts__dnnl_cache_clear(void) {
  for (size_t i = 0; i < g_cap; i++) {
    entry *e = &g_tab[i];
    if (!e->hash) continue;
    if (e->p->prim) dnnl_primitive_destroy(e->p->prim);
    if (e->p->pd) dnnl_primitive_desc_destroy(e->p->pd);
    free(e->p->aux);
    free(e->p);
    free(e->key);
  }
  free(g_tab);
  g_tab = NULL;
  g_cap = g_n = 0;
}

size_t ts__dnnl_cache_size(void) { return g_n; }

int ts__dnnl_bf16(void) {
  static int known = -1; /* a race only computes the same answer twice */
  int k = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
  if (k >= 0) return k;
  dnnl_memory_desc_t mds[3];
  const int64_t dims[2] = {16, 16};
  int ok = 1;
  for (int i = 0; i < 3 && ok; i++) ok = ts__dnnl_md_plain(&mds[i], 2, dims, dnnl_bf16) == TS_OK;
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  ok = ok && dnnl_matmul_desc_init(&md, &mds[0], &mds[1], NULL, &mds[2]) == dnnl_success &&
       dnnl_primitive_desc_create(&pd, &md, NULL, ts__dnnl_engine(), NULL) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  __atomic_store_n(&known, ok, __ATOMIC_RELEASE);
  return ok;
}

dnnl_memory_t ts__dnnl_mem(const dnnl_memory_desc_t *md, void *data) {
  dnnl_memory_t m = NULL;
  if (dnnl_memory_create(&m, md, ts__dnnl_engine(), data) != dnnl_success) return NULL;
  return m;
}

int ts__dnnl_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, dnnl_data_type_t dt) {
  dnnl_dims_t d, strides;
  int64_t s = 1;
  for (int i = ndims - 1; i >= 0; i--) {
    d[i] = dims[i];
    strides[i] = s;
    s *= dims[i];
  }
  return ts__dnnl_check(dnnl_memory_desc_init_by_strides(md, ndims, d, dt, strides),
                        "plain memory descriptor");
}

int ts__dnnl_check(dnnl_status_t st, const char *what) {
  if (st == dnnl_success) return TS_OK;
  return ts_error_set(TS_EBACKEND, "oneDNN %s failed (status %d)", what, (int)st);
}

int ts__dnnl_run(ts__dnnl_prim *p, int nargs, dnnl_exec_arg_t *args, const char *what) {
  int rc = TS_OK;
  for (int i = 0; i < nargs; i++)
    if (!args[i].memory) rc = ts_error_set(TS_EBACKEND, "oneDNN %s: memory creation failed", what);
  if (rc == TS_OK) {
    dnnl_status_t st = dnnl_primitive_execute(p->prim, ts__dnnl_stream(), nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(ts__dnnl_stream());
    rc = ts__dnnl_check(st, what);
  }
  for (int i = 0; i < nargs; i++)
    if (args[i].memory) dnnl_memory_destroy(args[i].memory);
  return rc;
}

int ts__dnnl_md3(dnnl_memory_desc_t *md, int64_t batch, int64_t rows, int64_t cols, int trans, dnnl_data_type_t dt) {
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {rows * cols, trans ? 1 : cols, trans ? rows : 1};
  return ts__dnnl_check(dnnl_memory_desc_init_by_strides(md, 3, dims, dt, strides),
                        dt == dnnl_bf16 ? "bf16 matmul memory descriptor" : "matmul memory descriptor");
}

void *ts__scratch_grow(void **buf, size_t *cap, size_t bytes) {
  if (bytes > *cap) {
    ts_free(*buf);
    *buf = ts_alloc(bytes);
    *cap = *buf ? bytes : 0;
  }
  return *buf;
}
