/* The source object: a table of functions over a random-access collection of samples. Every
 * built-in source (IDX, CIFAR, image folder, records, text) is created through ts_source_create
 * with its own vtable, exactly like a user's callback source. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "source_internal.h"

struct ts_source {
  ts_source_vtable vt;
  void *self;
  atomic_int refs; /* ts_source_ref / ts_source_free; destroyed at 0 */
};

void ts_sample_free(ts_sample *s) {
  if (!s) return;
  ts_tensor_free(&s->data);
  ts_tensor_free(&s->target);
  memset(s, 0, sizeof *s);
  s->label = -1;
}

int ts_source_create(const ts_source_vtable *vt, void *self, ts_source **out) {
  if (out) *out = NULL;
  if (!vt || !out) return ts_error_set(TS_EINVAL, "ts_source_create: NULL vtable or output");
  if (!vt->len || !vt->get)
    return ts_error_set(TS_EINVAL, "ts_source_create: source '%s' lacks a %s function",
                        vt->kind ? vt->kind : "callback", vt->len ? "get" : "len");
  ts_source *s = calloc(1, sizeof *s);
  if (!s) return ts_error_set(TS_ENOMEM, "ts_source_create: out of memory");
  s->vt = *vt;
  if (!s->vt.kind) s->vt.kind = "callback";
  s->self = self;
  atomic_init(&s->refs, 1);
  *out = s;
  return TS_OK;
}

ts_source *ts_source_ref(ts_source *s) {
  if (s) atomic_fetch_add(&s->refs, 1);
  return s;
}

void ts_source_free(ts_source *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) > 1) return;
  if (s->vt.destroy) s->vt.destroy(s->self);
  free(s);
}

/* ---- named sources (a process-wide table; a handful of entries) ---- */

typedef struct named {
  char *name;
  ts_source *src;
  struct named *next;
} named;

static named *g_named;
static pthread_mutex_t g_named_mu = PTHREAD_MUTEX_INITIALIZER;

static int name_ok(const char *name) {
  if (!name || !name[0]) return ts_error_set(TS_EINVAL, "source registry: empty name");
  if (strlen(name) > TS_SOURCE_NAME_MAX)
    return ts_error_set(TS_EINVAL, "source registry: name '%.40s...' longer than %d bytes", name, TS_SOURCE_NAME_MAX);
  return TS_OK;
}

int ts_source_register(const char *name, ts_source *s) {
  int rc = name_ok(name);
  if (rc) return rc;
  if (!s) return ts_error_set(TS_EINVAL, "ts_source_register('%s'): NULL source", name);
  named *e = malloc(sizeof *e);
  char *n = strdup(name);
  if (!e || !n) {
    free(e);
    free(n);
    return ts_error_set(TS_ENOMEM, "ts_source_register: out of memory");
  }
  pthread_mutex_lock(&g_named_mu);
  for (named *x = g_named; x; x = x->next)
    if (!strcmp(x->name, name)) {
      pthread_mutex_unlock(&g_named_mu);
      free(e);
      free(n);
      return ts_error_set(TS_EINVAL, "ts_source_register: a source named '%s' is registered already", name);
    }
  e->name = n;
  e->src = ts_source_ref(s);
  e->next = g_named;
  g_named = e;
  pthread_mutex_unlock(&g_named_mu);
  return TS_OK;
}

int ts_source_unregister(const char *name) {
  named *e = NULL;
  pthread_mutex_lock(&g_named_mu);
  for (named **pp = &g_named; name && *pp; pp = &(*pp)->next)
    if (!strcmp((*pp)->name, name)) {
      e = *pp;
      *pp = e->next;
      break;
    }
  pthread_mutex_unlock(&g_named_mu);
  if (!e) return ts_error_set(TS_ENOTFOUND, "ts_source_unregister: no source named '%s'", name ? name : "(null)");
  ts_source_free(e->src); /* outside the lock: a destroy may take other locks */
  free(e->name);
  free(e);
  return TS_OK;
}

int ts_source_lookup(const char *name, ts_source **out) {
  if (out) *out = NULL;
  if (!out) return ts_error_set(TS_EINVAL, "ts_source_lookup: NULL output");
  pthread_mutex_lock(&g_named_mu);
  for (named *x = g_named; name && x; x = x->next)
    if (!strcmp(x->name, name)) *out = ts_source_ref(x->src);
  pthread_mutex_unlock(&g_named_mu);
  if (!*out)
    return ts_error_set(TS_ENOTFOUND, "no source is registered as '%s' (ts_source_register; in Python, the data "
                        "set that registered it is gone)", name ? name : "(null)");
  return TS_OK;
}

int64_t ts_source_len(const ts_source *s) { return s ? s->vt.len(s->self) : 0; }

const char *ts_source_kind(const ts_source *s) { return s ? s->vt.kind : "?"; }

int ts_source_get(ts_source *s, int64_t index, ts_sample *out) {
  if (!out) return ts_error_set(TS_EINVAL, "ts_source_get: NULL output");
  memset(out, 0, sizeof *out);
  out->label = -1;
  if (!s) return ts_error_set(TS_EINVAL, "ts_source_get: NULL source");
  int64_t n = s->vt.len(s->self);
  if (index < 0 || index >= n)
    return ts_error_set(TS_ERANGE, "%s source: sample index %lld out of range 0..%lld", s->vt.kind,
                        (long long)index, (long long)n - 1);
  int rc = s->vt.get(s->self, index, out);
  if (rc == TS_OK && !out->data.data)
    rc = ts_error_set(TS_EFORMAT, "%s source: sample %lld has no data tensor", s->vt.kind, (long long)index);
  if (rc != TS_OK) {
    ts_sample_free(out);
    if (rc > 0) rc = TS_EIO; /* a user callback returned a positive code */
  }
  return rc;
}

int64_t ts_source_label(ts_source *s, int64_t index) {
  if (!s) return ts_error_set(TS_EINVAL, "ts_source_label: NULL source");
  int64_t n = s->vt.len(s->self);
  if (index < 0 || index >= n)
    return ts_error_set(TS_ERANGE, "%s source: sample index %lld out of range 0..%lld", s->vt.kind,
                        (long long)index, (long long)n - 1);
  if (s->vt.label) return s->vt.label(s->self, index);
  ts_sample smp;
  int rc = ts_source_get(s, index, &smp);
  if (rc) return rc;
  int64_t l = smp.label;
  ts_sample_free(&smp);
  return l;
}

int ts_source_sample_name(ts_source *s, int64_t index, char *buf, size_t cap) {
  if (!buf || !cap) return 0;
  buf[0] = 0;
  if (!s || !s->vt.sample_name || index < 0 || index >= s->vt.len(s->self)) return 0;
  char saved[1024]; /* naming a sample must not replace the error being reported */
  snprintf(saved, sizeof saved, "%s", ts_last_error());
  int rc = s->vt.sample_name(s->self, index, buf, cap);
  ts_error_set(TS_OK, "%s", saved);
  if (rc != TS_OK) buf[0] = 0;
  return buf[0] != 0;
}

void *ts__source_self(const ts_source *s, const ts_source_vtable **vt) {
  if (vt) *vt = s ? &s->vt : NULL;
  return s ? s->self : NULL;
}

int ts_source_num_classes(ts_source *s) {
  if (!s || !s->vt.num_classes) return 0;
  return s->vt.num_classes(s->self);
}

/* ---- helpers shared by the built-in sources ---- */

int ts__map_file(const char *path, ts__mapped *m) {
  memset(m, 0, sizeof *m);
  int fd;
  uint64_t size;
  int rc = ts__file_open_read(path, "cannot open", &fd, &size);
  if (rc) return rc;
  if (size > SIZE_MAX) {
    close(fd);
    return ts_error_set(TS_ENOMEM, "%s: %llu bytes do not fit in memory", path, (unsigned long long)size);
  }
  m->size = (size_t)size;
  if (m->size > 0) {
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return ts_error_set(TS_EIO, "%s: cannot map %zu bytes: %s", path, m->size, strerror(e));
    }
    m->data = p;
  }
  close(fd);
  return TS_OK;
}

void ts__unmap_file(ts__mapped *m) {
  if (m->data && m->size) munmap((void *)m->data, m->size);
  memset(m, 0, sizeof *m);
}
