/* IDX reader: the real Fashion-MNIST files (60,000 + 10,000, 6,000 per class in train), and
 * malformed files (bad magic, unsupported type, truncation) reported with the file name. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tessera/data.h"
#include "test_util.h"

static void write_file(const char *path, const unsigned char *b, size_t n, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    gzwrite(f, b, (unsigned)n);
    gzclose(f);
  } else {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
  }
}

int main(void) {
  ts_tensor im, lb;
  if (ts_test_have_fashion_mnist()) {
    CHECK_OK(ts_mnist_load(ts_test_fashion_mnist_dir(), "train", &im, &lb));
    CHECK(im.shape.ndim == 3 && im.shape.dims[0] == 60000 && im.shape.dims[1] == 28 && im.shape.dims[2] == 28);
    int hist[10] = {0};
    for (int i = 0; i < 60000; i++) hist[((uint8_t *)lb.data)[i]]++;
    for (int c = 0; c < 10; c++) CHECK_MSG(hist[c] == 6000, "class %d has %d", c, hist[c]);
    ts_tensor_free(&im);
    ts_tensor_free(&lb);
    CHECK_OK(ts_mnist_load(ts_test_fashion_mnist_dir(), "t10k", &im, &lb));
    CHECK(im.shape.dims[0] == 10000 && lb.shape.dims[0] == 10000);
    ts_tensor_free(&im);
    ts_tensor_free(&lb);
    printf("real Fashion-MNIST: 60000 train (6000 per class) + 10000 test\n");
  }
  char dir[] = "/tmp/ts_idx_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char p[256];
  /* a good tiny file, plain and gzip */
  unsigned char good[4 + 8 + 6] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  for (int gz = 0; gz < 2; gz++) {
    snprintf(p, sizeof p, "%s/good%d", dir, gz);
    write_file(p, good, sizeof good, gz);
    CHECK_OK(ts_idx_load(p, &im));
    CHECK(im.shape.ndim == 2 && im.shape.dims[1] == 3 && ((uint8_t *)im.data)[5] == 6);
    ts_tensor_free(&im);
  }
  unsigned char bad[sizeof good];
  memcpy(bad, good, sizeof good);
  bad[0] = 1;
  snprintf(p, sizeof p, "%s/badmagic", dir);
  write_file(p, bad, sizeof bad, 0);
  CHECK(ts_idx_load(p, &im) == TS_EFORMAT);
  CHECK(strstr(ts_last_error(), "badmagic") && strstr(ts_last_error(), "magic"));
  memcpy(bad, good, sizeof good);
  bad[2] = 0x0d; /* float */
  snprintf(p, sizeof p, "%s/float", dir);
  write_file(p, bad, sizeof bad, 1);
  CHECK(ts_idx_load(p, &im) == TS_EFORMAT);
  snprintf(p, sizeof p, "%s/trunc", dir);
  write_file(p, good, sizeof good - 2, 0);
  CHECK(ts_idx_load(p, &im) == TS_EFORMAT);
  CHECK_MSG(strstr(ts_last_error(), "truncated") && strstr(ts_last_error(), "trunc"), "%s", ts_last_error());
  snprintf(p, sizeof p, "%s/trunchdr", dir);
  write_file(p, good, 6, 1);
  CHECK(ts_idx_load(p, &im) == TS_EFORMAT);
  CHECK(ts_idx_load("/nonexistent/x.idx", &im) == TS_ENOTFOUND);
  /* label out of range */
  unsigned char imgs[4 + 12 + 2 * 4] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  unsigned char labs[4 + 4 + 2] = {0, 0, 8, 1, 0, 0, 0, 2, 3, 11};
  snprintf(p, sizeof p, "%s/x-images-idx3-ubyte", dir);
  write_file(p, imgs, sizeof imgs, 0);
  snprintf(p, sizeof p, "%s/x-labels-idx1-ubyte", dir);
  write_file(p, labs, sizeof labs, 0);
  CHECK(ts_mnist_load(dir, "x", &im, &lb) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "label 11") && strstr(ts_last_error(), "record 1"), "%s", ts_last_error());
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  printf("checked: plain and gzip IDX, bad magic, unsupported type, truncated header/data, missing file, label range\n");
  return ts_test_finish("test_idx");
}
