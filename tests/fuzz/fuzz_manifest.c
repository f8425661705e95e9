/* libFuzzer target for the manifest reader of sliced checkpoints (src/io/ckpt_manifest.c): the
 * bytes are a directory's manifest.json -> ts_ckpt_manifest_load. A manifest that loads is read
 * back through every accessor (files, tensors, pieces, info), compared with its own tensors
 * (ts_ckpt_manifest_match, strict: it must match itself), checked for cover
 * (ts_ckpt_manifest_check, when its tensors are small: the check walks every run of elements,
 * which ts_ckpt_verify bounds by the rank files' real sizes), written out and loaded again (the
 * copy must hold the same files, tensors and pieces), and opened by ts_ckpt_read_info and
 * ts_ckpt_verify (the rank files are absent, so verify must fail cleanly).
 * Invariants: a failure is a negative status with a message, never a crash, a leak or an abort.
 * Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/checkpoint.h"

static char g_dir[128], g_dir2[140], g_file[160], g_file2[160];

static void check_failure(int rc) {
  if (rc >= 0 || !ts_last_error()[0]) {
    fprintf(stderr, "fuzz_manifest: failure status %d without a message\n", rc);
    abort();
  }
}

static void quiet(ts_log_level level, const char *msg, void *user) { (void)level; (void)msg; (void)user; }

static int same(const ts_ckpt_manifest *a, const ts_ckpt_manifest *b) {
  if (ts_ckpt_manifest_num_files(a) != ts_ckpt_manifest_num_files(b) ||
      ts_ckpt_manifest_num_tensors(a) != ts_ckpt_manifest_num_tensors(b) ||
      ts_ckpt_manifest_world_size(a) != ts_ckpt_manifest_world_size(b) ||
      strcmp(ts_ckpt_manifest_id(a), ts_ckpt_manifest_id(b)))
    return 0;
  for (int i = 0; i < ts_ckpt_manifest_num_files(a); i++) {
    const char *na, *nb, *sa, *sb;
    int ra, rb;
    uint64_t ba, bb;
    if (ts_ckpt_manifest_file(a, i, &na, &ra, &ba, &sa) || ts_ckpt_manifest_file(b, i, &nb, &rb, &bb, &sb)) return 0;
    if (strcmp(na, nb) || ra != rb || ba != bb || strcmp(sa, sb)) return 0;
  }
  for (int i = 0; i < ts_ckpt_manifest_num_tensors(a); i++) {
    const char *na, *nb;
    ts_dtype da, db;
    ts_shape sa, sb;
    int pa, pb;
    if (ts_ckpt_manifest_tensor(a, i, &na, &da, &sa, &pa) || ts_ckpt_manifest_tensor(b, i, &nb, &db, &sb, &pb))
      return 0;
    if (strcmp(na, nb) || da != db || !ts_shape_equal(&sa, &sb) || pa != pb) return 0;
    for (int j = 0; j < pa; j++) {
      const char *fa, *fb, *ea, *eb;
      ts_region ra, rb;
      if (ts_ckpt_manifest_piece(a, i, j, &fa, &ea, &ra) || ts_ckpt_manifest_piece(b, i, j, &fb, &eb, &rb)) return 0;
      if (strcmp(fa, fb) || strcmp(ea, eb) || memcmp(&ra, &rb, sizeof ra)) return 0;
    }
  }
  return 1;
}

static void exercise(ts_ckpt_manifest *m) {
  int nt = ts_ckpt_manifest_num_tensors(m), nf = ts_ckpt_manifest_num_files(m);
  for (int i = 0; i < nf; i++)
    if (ts_ckpt_manifest_file(m, i, NULL, NULL, NULL, NULL)) abort();
  if (ts_ckpt_manifest_file(m, nf, NULL, NULL, NULL, NULL) != TS_ERANGE) abort();
  ts_piece *want = calloc((size_t)nt + 1, sizeof *want);
  if (!want) return;
  double elements = 0;
  for (int i = 0; i < nt; i++) {
    int np;
    if (ts_ckpt_manifest_tensor(m, i, (const char **)&want[i].name, &want[i].dtype, &want[i].shape, &np)) abort();
    elements += (double)ts_shape_numel(&want[i].shape);
    for (int j = 0; j < np; j++) {
      const char *file, *entry;
      ts_region r;
      if (ts_ckpt_manifest_piece(m, i, j, &file, &entry, &r) || !file || !entry) abort();
      elements += (double)ts_region_numel(&r);
    }
  }
  if (ts_ckpt_manifest_tensor(m, nt, NULL, NULL, NULL, NULL) != TS_ERANGE) abort();
  ts_ckpt_state expect = {0};
  ts_ckpt_info info;
  if (ts_ckpt_manifest_info(m, &info) == TS_OK) expect.model = info.model;
  expect.config_hash = info.has_config_hash ? info.config_hash : 0;
  ts_error_set(TS_OK, "%s", "");
  int rc = ts_ckpt_manifest_match(m, &expect, want, nt, 1, 1);
  if (rc) {
    fprintf(stderr, "fuzz_manifest: a manifest does not match its own tensors: %s\n", ts_last_error());
    abort();
  }
  ts_ckpt_info_free(&info);
  free(want);
  if (elements < (1 << 22) && (rc = ts_ckpt_manifest_check(m))) check_failure(rc);
  (void)ts_ckpt_manifest_layout(m);
  (void)ts_ckpt_manifest_dir(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/ts_fuzz_manifest_%d", base, (int)getpid());
    snprintf(g_dir2, sizeof g_dir2, "%s.copy", g_dir);
    snprintf(g_file, sizeof g_file, "%s/%s", g_dir, TS_CKPT_MANIFEST);
    snprintf(g_file2, sizeof g_file2, "%s/%s", g_dir2, TS_CKPT_MANIFEST);
    if ((mkdir(g_dir, 0700) && access(g_dir, W_OK)) || (mkdir(g_dir2, 0700) && access(g_dir2, W_OK))) abort();
    ts_log_set_hook(quiet, NULL);
  }
  FILE *fp = fopen(g_file, "wb");
  if (!fp) abort();
  if (size && fwrite(data, 1, size, fp) != size) abort();
  fclose(fp);
  ts_error_set(TS_OK, "%s", "");
  ts_ckpt_manifest *m = NULL;
  int rc = ts_ckpt_manifest_load(g_dir, &m);
  if (rc) {
    check_failure(rc);
    if (m) abort();
  } else {
    exercise(m);
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_ckpt_manifest_write(m, g_dir2))) check_failure(rc);
    ts_ckpt_manifest *m2 = NULL;
    if (!rc && (rc = ts_ckpt_manifest_load(g_dir2, &m2))) {
      fprintf(stderr, "fuzz_manifest: a manifest written does not load again: %s\n", ts_last_error());
      abort();
    }
    if (m2 && !same(m, m2)) {
      fprintf(stderr, "fuzz_manifest: a manifest written and loaded again differs\n");
      abort();
    }
    ts_ckpt_manifest_free(m2);
    ts_ckpt_manifest_free(m);
    unlink(g_file2);
    ts_ckpt_info info;
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_ckpt_read_info(g_dir, &info))) check_failure(rc);
    else ts_ckpt_info_free(&info);
    char summary[256];
    ts_error_set(TS_OK, "%s", "");
    rc = ts_ckpt_verify(g_dir, summary, sizeof summary);
    if (rc == TS_OK && ts_ckpt_manifest_load(g_dir, &m) == TS_OK) { /* only a manifest without rank files */
      int files = ts_ckpt_manifest_num_files(m);
      ts_ckpt_manifest_free(m);
      if (files) abort();
    } else if (rc) {
      check_failure(rc);
    }
  }
  unlink(g_file); /* libFuzzer may end the process without running atexit handlers */
  return 0;
}
