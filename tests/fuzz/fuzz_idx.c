/* libFuzzer target for the IDX reader: bytes -> a temporary file -> ts_idx_load (plain, or gzip
 * when the bytes are gzip), and the same bytes cut in two at a point taken from the first byte ->
 * an "x-images-idx3-ubyte" / "x-labels-idx1-ubyte" pair -> ts_source_mnist -> every sample.
 * Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/data.h"

static char g_dir[128], g_one[160], g_img[160], g_lab[160];

/* Removes the files after every input: libFuzzer may end the process without atexit handlers. */
static void cleanup(void) {
  unlink(g_one);
  unlink(g_img);
  unlink(g_lab);
  rmdir(g_dir);
}

static int put(const char *path, const uint8_t *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  fwrite(d, 1, n, f);
  fclose(f);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "%s/ts_fuzz_idx_%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
    snprintf(g_one, sizeof g_one, "%s/one", g_dir);
    snprintf(g_img, sizeof g_img, "%s/x-images-idx3-ubyte", g_dir);
    snprintf(g_lab, sizeof g_lab, "%s/x-labels-idx1-ubyte", g_dir);
  }
  if (size < 1) return 0;
  mkdir(g_dir, 0700);
  if (put(g_one, data + 1, size - 1) == 0) {
    ts_tensor t;
    if (ts_idx_load(g_one, &t) == TS_OK) ts_tensor_free(&t);
  }
  /* split: the labels file is the last data[0] bytes (at most what there is) */
  size_t nl = data[0] < size - 1 ? data[0] : size - 1, ni = size - 1 - nl;
  if (put(g_img, data + 1, ni) == 0 && put(g_lab, data + 1 + ni, nl) == 0) {
    ts_source *s;
    if (ts_source_mnist(g_dir, "x", &s) == TS_OK) {
      int64_t n = ts_source_len(s);
      for (int64_t i = 0; i < n; i++) {
        ts_sample smp;
        if (ts_source_get(s, i, &smp) == TS_OK) ts_sample_free(&smp);
        (void)ts_source_label(s, i);
      }
      ts_source_free(s);
    }
  }
  cleanup();
  return 0;
}
