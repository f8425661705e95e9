/* Base layer: status strings, error messages, Philox known answers, RNG statistics, logging hook,
 * opening user-given files for reading (FIFOs and folders refused at once). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rfile.h"
#include "tessera/config.h"
#include "tessera/io.h"
#include "tessera/strategy.h"
#include "test_util.h"

static int has(const char *s) { return strstr(ts_last_error(), s) != NULL; }

/* A FIFO or a folder where a file is expected fails at once with a message naming it; alarm()
 * turns a regression (open blocking on the FIFO) into a failure instead of a hang. */
static void test_read_files(void) {
  char dir[] = "/tmp/ts_rfile_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char fifo[300], sub[300], reg[300], none[300];
  snprintf(fifo, sizeof fifo, "%s/fifo.yaml", dir);
  snprintf(sub, sizeof sub, "%s/sub.safetensors", dir);
  snprintf(reg, sizeof reg, "%s/reg.txt", dir);
  snprintf(none, sizeof none, "%s/none.json", dir);
  CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0);
  FILE *w = fopen(reg, "wb");
  CHECK(w && fputs("model: {name: mlp}\n", w) >= 0 && fclose(w) == 0);
  alarm(20);
  int fd = -1;
  uint64_t size = 0;
  CHECK(ts__file_open_read(fifo, "cannot read the config", &fd, NULL) == TS_EIO && fd == -1);
  CHECK(has(fifo) && has("cannot read the config: is a FIFO"));
  CHECK(ts__file_open_read(sub, NULL, &fd, NULL) == TS_EIO && has(sub) && has("cannot open: is a directory"));
  CHECK(ts__file_open_read(none, NULL, &fd, NULL) == TS_ENOTFOUND && has(none) && has("No such file"));
  CHECK_OK(ts__file_open_read(reg, NULL, &fd, &size));
  CHECK(fd >= 0 && size == 19);
  char b[32] = {0};
  CHECK(fd >= 0 && ts__read_full(fd, b, 19) == 0 && !strcmp(b, "model: {name: mlp}\n"));
  CHECK(fd >= 0 && ts__read_full(fd, b, 1) == -2);
  if (fd >= 0) close(fd);
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(ts__file_read_all(reg, NULL, &text, &len));
  CHECK(text && len == 19 && !strcmp(text, "model: {name: mlp}\n"));
  free(text);
  CHECK(ts__file_read_all(fifo, "x", &text, &len) == TS_EIO && text == NULL);
  /* through the readers that use it */
  ts_config cfg;
  CHECK(ts_config_load(fifo, NULL, 0, &cfg) == TS_ECONFIG && has(fifo) && has("is a FIFO"));
  CHECK(ts_config_load(sub, NULL, 0, &cfg) == TS_ECONFIG && has(sub) && has("is a directory"));
  ts_st_file *st = NULL;
  CHECK(ts_st_open(fifo, &st) == TS_EIO && st == NULL && has(fifo) && has("is a FIFO"));
  CHECK(ts_st_open(sub, &st) == TS_EIO && st == NULL && has(sub) && has("is a directory"));
  ts_strategy_set *ss = NULL;
  CHECK(ts_strategy_set_load(fifo, 1, &ss) == TS_EIO && ss == NULL && has(fifo) && has("is a FIFO"));
  alarm(0);
  unlink(fifo);
  rmdir(sub);
  unlink(reg);
  rmdir(dir);
}

static int hook_calls;
static char hook_last[256];
static void hook(ts_log_level lv, const char *msg, void *user) {
  (void)lv;
  (void)user;
  hook_calls++;
  snprintf(hook_last, sizeof hook_last, "%s", msg);
}

int main(void) {
  /* X-macro codes and strings */
  CHECK(strcmp(ts_strerror(TS_OK), "success") == 0);
  CHECK(strcmp(ts_strerror(TS_ESHAPE), "shape mismatch") == 0);
  CHECK(strcmp(ts_strerror(12345), "unknown error") == 0);
  CHECK(ts_error_set(TS_EIO, "file %s", "a.bin") == TS_EIO);
  CHECK(strcmp(ts_last_error(), "file a.bin") == 0);
  ts_error_wrap(TS_EIO, "loading %s", "ckpt");
  CHECK(strcmp(ts_last_error(), "loading ckpt: file a.bin") == 0);

  /* Philox4x32-10 known-answer tests from Random123 (kat_vectors). */
  ts_philox_out o = ts_philox4x32(0, 0, 0);
  CHECK(o.v[0] == 0x6627e8d5u && o.v[1] == 0xe169c58du && o.v[2] == 0xbc57ac4cu && o.v[3] == 0x9b00dbd8u);
  o = ts_philox4x32(0xffffffffffffffffULL, 0xffffffffffffffffULL, 0xffffffffffffffffULL);
  CHECK(o.v[0] == 0x408f276du && o.v[1] == 0x41c83b0eu && o.v[2] == 0xa20bc7c6u && o.v[3] == 0x6d5451fdu);
  /* ctr = (243f6a88, 85a308d3, 13198a2e, 03707344), key = (a4093822, 299f31d0) */
  o = ts_philox4x32(0x299f31d0a4093822ULL, 0x0370734413198a2eULL, 0x85a308d3243f6a88ULL);
  CHECK(o.v[0] == 0xd16cfe09u && o.v[1] == 0x94fdccebu && o.v[2] == 0x5001e420u && o.v[3] == 0x24126ea1u);

  /* uniform / normal moments */
  double s = 0, s2 = 0, n1 = 0, n2 = 0;
  const int N = 200000;
  uint64_t key = ts_hash_name("w", 42);
  for (int i = 0; i < N; i++) {
    double u = ts_rng_uniform_at(key, i), z = ts_rng_normal_at(key, i);
    CHECK(u >= 0 && u < 1);
    s += u; s2 += u * u; n1 += z; n2 += z * z;
  }
  double mu = s / N, var = s2 / N - mu * mu;
  CHECK_MSG(fabs(mu - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.002, "uniform mean %g var %g", mu, var);
  double zm = n1 / N, zv = n2 / N - zm * zm;
  CHECK_MSG(fabs(zm) < 0.01 && fabs(zv - 1) < 0.02, "normal mean %g var %g", zm, zv);
  /* keys differ by name and seed; same inputs give the same value */
  CHECK(ts_hash_name("w", 1) != ts_hash_name("w", 2));
  CHECK(ts_hash_name("a", 1) != ts_hash_name("b", 1));
  CHECK(ts_rng_uniform_at(key, 7) == ts_rng_uniform_at(key, 7));

  /* logging hook and level */
  ts_log_set_hook(hook, NULL);
  ts_log_set_level(TS_LOG_INFO);
  ts_log(TS_LOG_DEBUG, "dropped %d", 1);
  ts_log(TS_LOG_WARN, "kept %d", 2);
  CHECK(hook_calls == 1 && strcmp(hook_last, "kept 2") == 0);
  ts_log_set_hook(NULL, NULL);
  CHECK(ts_time_now() > 0);
  test_read_files();
  printf("checked: error codes/messages, Philox KATs, RNG moments over %d draws, logging hook, "
         "reading a FIFO/folder/missing/regular file\n", N);
  return ts_test_finish("test_base");
}
