/* Hostile sliced-checkpoint manifests (src/io/ckpt_manifest.c) that tests/fuzz/fuzz_manifest.c
 * found mishandled, each now refused or handled cleanly (the inputs are also in
 * tests/fuzz/corpus/manifest/). Run under the Asan build, the undefined behaviour itself fails:
 *  - a tensor without pieces (the cover check sorted a NULL array);
 *  - sizes whose product overflows (ts_shape_numel's signed overflow);
 *  - tensors of more than 2^63 elements in all (the sums of ts_ckpt_manifest_info overflowed);
 *  - values that loaded but could not be written back: an infinite loss scale (written as "inf",
 *    not JSON), a world size or rank beyond int (cut to an int). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/text.h"
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

  /* sizes whose product overflows int64: ts_shape_numel of the piece's region overflowed (signed) */
  rc = load(HEAD "\"loss_scale\":1,\"files\":[{\"name\":\"r\",\"rank\":0,\"bytes\":1,\"sha256\":"
                 "\"0000000000000000000000000000000000000000000000000000000000000000\"}],\"tensors\":[{\"name\":\"c\","
                 "\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"pieces\":[{\"file\":\"r\",\"entry\":\"c\"}]}]}",
            &m);
  CHECK_MSG(rc == TS_EFORMAT && !m && strstr(ts_last_error(), "tensors[0]: \"shape\" is not a list of at most") &&
                strstr(ts_last_error(), "2^53 elements"),
            "%d %s", rc, ts_last_error());
  /* ... and a product that overflows before a 0 size */
  rc = load(HEAD "\"loss_scale\":1,\"files\":[],\"tensors\":[{\"name\":\"c\",\"dtype\":\"F32\","
                 "\"shape\":[4294967296,4294967296,0],\"pieces\":[]}]}", &m);
  CHECK_MSG(rc == TS_EFORMAT && !m, "%d %s", rc, ts_last_error());
  /* a tensor of 2^53 elements still loads */
  CHECK_OK(load(HEAD "\"loss_scale\":1,\"files\":[],\"tensors\":[{\"name\":\"c\",\"dtype\":\"U8\","
                     "\"shape\":[2,4,1048576,1073741824],\"pieces\":[]}]}", &m));
  ts_ckpt_manifest_free(m);
  m = NULL;

  /* 1100 tensors of 2^53 elements: more than 2^63 in all */
  {
    ts__sb b = {0};
    ts__sb_printf(&b, HEAD "\"loss_scale\":1,\"files\":[],\"tensors\":[");
    for (int i = 0; i < 1100; i++)
      ts__sb_printf(&b, "%s{\"name\":\"param.t%d\",\"dtype\":\"U8\",\"shape\":[9007199254740992],\"pieces\":[]}",
                    i ? "," : "", i);
    ts__sb_printf(&b, "]}");
    rc = load(b.s, &m);
    CHECK_MSG(rc == TS_EFORMAT && !m && strstr(ts_last_error(), "tensors[1]: the tensors up to this one hold more than 2^53"),
              "%d %s", rc, ts_last_error());
    free(b.s);
    ts_ckpt_manifest_free(m);
    m = NULL;
  }

  rc = load(HEAD "\"loss_scale\":1e999,\"files\":[],\"tensors\":[]}", &m);
  CHECK_MSG(rc == TS_EFORMAT && !m && strstr(ts_last_error(), "\"loss_scale\" is missing or not a finite number"),
            "%d %s", rc, ts_last_error());
  rc = load("{\"format\":\"tessera-sliced/1\",\"id\":\"x\",\"version\":\"0.1.0\",\"model\":\"m\",\"step\":4,\"epoch\":2,"
            "\"batch_index\":0,\"seed\":\"4\",\"rng_counter\":\"5\",\"loss_scale_growth_tracker\":3,"
            "\"world_size\":4294967298,\"loss_scale\":1,\"files\":[],\"tensors\":[]}", &m);
  CHECK_MSG(rc == TS_EFORMAT && !m && strstr(ts_last_error(), "\"world_size\" 4294967298 is too large"), "%d %s", rc,
            ts_last_error());
  rc = load(HEAD "\"loss_scale\":1,\"files\":[{\"name\":\"r\",\"rank\":2147483648,\"bytes\":1,\"sha256\":"
                 "\"0000000000000000000000000000000000000000000000000000000000000000\"}],\"tensors\":[]}", &m);
  CHECK_MSG(rc == TS_EFORMAT && !m && strstr(ts_last_error(), "files[0]: \"rank\" 2147483648 is too large"), "%d %s", rc,
            ts_last_error());
  /* the largest of each still loads, and a manifest written loads again */
  CHECK_OK(load("{\"format\":\"tessera-sliced/1\",\"id\":\"x\",\"version\":\"0.1.0\",\"model\":\"m\",\"step\":4,"
                "\"epoch\":2,\"batch_index\":0,\"seed\":\"4\",\"rng_counter\":\"5\",\"loss_scale_growth_tracker\":3,"
                "\"world_size\":2147483647,\"loss_scale\":1.7976931348623157e308,\"files\":[{\"name\":\"r\",\"rank\":"
                "2147483647,\"bytes\":1,\"sha256\":\"0000000000000000000000000000000000000000000000000000000000000000\"}],"
                "\"tensors\":[]}", &m));
  if (m) {
    char copy[300];
    snprintf(copy, sizeof copy, "%s/copy", g_dir);
    mkdir(copy, 0700);
    CHECK_OK(ts_ckpt_manifest_write(m, copy));
    ts_ckpt_manifest *m2 = NULL;
    CHECK_OK(ts_ckpt_manifest_load(copy, &m2));
    CHECK(m2 && ts_ckpt_manifest_world_size(m2) == 2147483647);
    ts_ckpt_manifest_free(m2);
    ts_ckpt_manifest_free(m);
    m = NULL;
    snprintf(copy, sizeof copy, "%s/copy/%s", g_dir, TS_CKPT_MANIFEST);
    unlink(copy);
    snprintf(copy, sizeof copy, "%s/copy", g_dir);
    rmdir(copy);
  }

  char path[400];
  snprintf(path, sizeof path, "%s/%s", g_dir, TS_CKPT_MANIFEST);
  unlink(path);
  rmdir(g_dir);
  return ts_test_finish("test_manifest_inputs");
}
