/* The CUDA driver API loaded at run time (cuda_api.h). TESSERA_LIBCUDA names another library to
 * load instead of libcuda.so.1 (tests use a stand-in driver; a machine may keep the driver
 * elsewhere). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"
#include "device/cuda_api.h"

static ts__cuda_fns fns;
static int loaded_rc = 1; /* 1: not tried; TS_OK; or the failure, kept with its message */
static char loaded_msg[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

const char *ts__cuda_error(CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (fns.GetErrorName) fns.GetErrorName(r, &name);
  if (fns.GetErrorString) fns.GetErrorString(r, &text);
  if (name && text) snprintf(buf, cap, "%s: %s", name, text);
  else snprintf(buf, cap, "CUDA error %d", r);
  return buf;
}

const char *ts__dl_fill(void *h, const ts__dl_sym *want, size_t n, void *table) {
  for (size_t i = 0; i < n; i++) {
    void *sym = dlsym(h, want[i].name);
    if (!sym) return want[i].name;
    memcpy((char *)table + want[i].off, &sym, sizeof sym);
  }
  return NULL;
}

static void load(void) {
  const char *lib = getenv("TESSERA_LIBCUDA");
  if (!lib || !*lib) lib = "libcuda.so.1";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(loaded_msg, sizeof loaded_msg, "no NVIDIA driver on this machine (%s)", e ? e : lib);
    loaded_rc = TS_EUNSUPPORTED;
    return;
  }
  static const ts__dl_sym want[] = {
#define F(field, sym) {#sym, offsetof(ts__cuda_fns, field)},
      TS__CUDA_SYMBOLS(F)
#undef F
  };
  const char *miss = ts__dl_fill(h, want, sizeof want / sizeof want[0], &fns);
  if (miss) {
    snprintf(loaded_msg, sizeof loaded_msg, "the NVIDIA driver %s lacks %s (too old a driver?)", lib, miss);
    loaded_rc = TS_EUNSUPPORTED;
    memset(&fns, 0, sizeof fns);
    return; /* the handle stays open: harmless, and dlclose of a driver is not */
  }
  CUresult r = fns.Init(0);
  if (r) {
    char e[200];
    snprintf(loaded_msg, sizeof loaded_msg, "the NVIDIA driver does not start (cuInit: %s)%s", ts__cuda_error(r, e, sizeof e),
             r == 100 ? ": no GPU on this machine" : "");
    loaded_rc = TS_EUNSUPPORTED;
    return;
  }
  loaded_rc = TS_OK;
}

const ts__cuda_fns *ts__cuda_api(void) {
  pthread_once(&once, load);
  if (loaded_rc) {
    ts_error_set(loaded_rc, "%s", loaded_msg);
    return NULL;
  }
  return &fns;
}
