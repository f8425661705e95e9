/* Hostile sliced-checkpoint manifests (src/io/ckpt_manifest.c) that tests/fuzz/fuzz_manifest.c
 * found mishandled, each now refused or handled cleanly (the inputs are also in
 * tests/fuzz/corpus/manifest/). Run under the Asan build, the undefined behaviour itself fails. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "test_util.h"

static char g_dir[256];

#define HEAD                                                                                              \
  "{\"format\":\"tessera-sliced/1\",\"id\":\"x\",\"version\":\"0.1.0\",\"model\":\"m\",\"step\":4,\"epoch\":2," \
  "\"batch_index\":0,\"seed\":\"4\",\"rng_counter\":\"5\",\"loss_scale_growth_tracker\":3,\"world_size\":2,"

/* Writes text as the directory's manifest and loads it: the status, *m the manifest (or NULL). */
static int load(const char *text, ts_ckpt_manifest **m) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", g_dir, TS_CKPT_MANIFEST);
  FILE *f = fopen(path, "w");
  if (!f) return TS_EIO;
  fputs(text, f);
  fclose(f);
  return ts_ckpt_manifest_load(g_dir, m);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ts_manifest_inputs_XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  ts_ckpt_manifest *m = NULL;

  /* a tensor without pieces, first in the list: the cover check sorted a NULL array (qsort) */
  CHECK_OK(load(HEAD "\"loss_scale\":0,\"files\":[],\"tensors\":[{\"name\":\"c\",\"dtype\":\"F32\",\"shape\":[],"
                     "\"pieces\":[]}]}", &m));
  if (m) {
    int rc = ts_ckpt_manifest_check(m);
    CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "tensor 'c': no piece holds it"), "%d %s", rc,
              ts_last_error());
    ts_ckpt_manifest_free(m);
    m = NULL;
  }
  char sum[300];
  int rc = ts_ckpt_verify(g_dir, sum, sizeof sum);
  CHECK_MSG(rc == TS_EINVAL && strstr(ts_last_error(), "no piece holds it"), "%d %s", rc, ts_last_error());

  char path[400];
  snprintf(path, sizeof path, "%s/%s", g_dir, TS_CKPT_MANIFEST);
  unlink(path);
  rmdir(g_dir);
  return ts_test_finish("test_manifest_inputs");
}
