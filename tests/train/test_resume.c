/* Exact resume: a run stopped at step k and resumed from its checkpoint ends with bitwise the
 * same parameters, BatchNorm statistics and optimizer state as a run that never stopped; the
 * same config twice gives bitwise identical results. Uses real Fashion-MNIST (a small subset)
 * with random crops and flips, shuffling, 2 workers and gradient accumulation. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "tessera/train.h"
#include "test_util.h"

static const char *k_yaml =
    "model: {name: convnet, channels: [4, 8]}\n"
    "data:\n"
    "  name: fashion_mnist\n"
    "  train_limit: 640\n"
    "  test_limit: 200\n"
    "  num_workers: 2\n"
    "  transforms:\n"
    "    - {name: random_crop, size: 28, padding: 2}\n"
    "    - {name: hflip, p: 0.5}\n"
    "    - {name: to_float, scale: 0.00392156862745098}\n"
    "    - {name: normalize, mean: [0.2860], std: [0.3530]}\n"
    "    - hwc_to_chw\n"
    "train: {epochs: 3, batch_size: 64, micro_batch_size: 32, seed: 7, eval_every: -1}\n"
    "optimizer: {name: adamw, lr: 0.003, schedule: {name: cosine, warmup_steps: 3}}\n"
    "log: {progress: off}\n";

typedef struct { int64_t stop_at; } stopper;
static int stop_cb(ts_trainer *t, const ts_step_info *s, void *u) {
  if (s->step == ((stopper *)u)->stop_at) ts_trainer_request_stop(t);
  return TS_OK;
}

/* Trains with `sets`; optionally stops at step `stop_at` (saving a checkpoint); returns a copy of
 * the final parameters + states + optimizer moments. */
static float *run(const char *dir, const char *resume, int64_t stop_at, size_t *n_out) {
  char s1[300], s2[300];
  snprintf(s1, sizeof s1, "checkpoint.dir=%s", dir);
  snprintf(s2, sizeof s2, "checkpoint.resume=%s", resume ? resume : "");
  char s3[4200];
  snprintf(s3, sizeof s3, "data.path=%s", ts_test_fashion_mnist_dir());
  const char *sets[] = {s1, s2, "checkpoint.save_last=true", s3};
  ts_config cfg;
  CHECK_OK(ts_config_load_string(k_yaml, "resume-test.yaml", sets, 4, &cfg));
  ts_trainer *t = NULL;
  CHECK_OK(ts_trainer_create(&cfg, &t));
  if (!t) return NULL;
  stopper st = {stop_at};
  ts_callback cb = {"stop", stop_cb, NULL, NULL, NULL, &st};
  if (stop_at > 0) ts_trainer_add_callback(t, &cb);
  CHECK_OK(ts_trainer_fit(t));
  ts_params *p = ts_trainer_params(t);
  size_t np = ts_params_numel(p), ns = ts_params_state_numel(p);
  float *out = malloc(sizeof(float) * (np + ns + 1));
  memcpy(out, ts_params_data(p), np * sizeof(float));
  memcpy(out + np, ts_params_states(p), ns * sizeof(float));
  out[np + ns] = (float)ts_trainer_step(t);
  *n_out = np + ns + 1;
  ts_trainer_free(t);
  return out;
}

int main(void) {
  if (!ts_test_have_fashion_mnist()) return ts_test_finish("test_resume");
  char da[] = "/tmp/ts_resume_a_XXXXXX", db[] = "/tmp/ts_resume_b_XXXXXX", dc[] = "/tmp/ts_resume_c_XXXXXX";
  CHECK(mkdtemp(da) && mkdtemp(db) && mkdtemp(dc));
  size_t na = 0, nb = 0, nc = 0, nr = 0;
  float *a = run(da, NULL, 0, &na);       /* uninterrupted: 30 steps */
  float *c = run(dc, NULL, 0, &nc);       /* same config again */
  float *b = run(db, NULL, 13, &nb);      /* stops at step 13 (mid-epoch 2) and saves */
  char ck[512];
  CHECK_OK(ts_ckpt_latest(db, "ckpt", ck, sizeof ck));
  float *r = run(db, ck, 0, &nr);         /* resumes from step 13 to the end */
  CHECK(a && b && c && r);
  if (a && b && c && r) {
    CHECK_MSG(a[na - 1] == 30 && b[nb - 1] == 13 && r[nr - 1] == 30, "steps %g %g %g", a[na - 1], b[nb - 1], r[nr - 1]);
    CHECK_MSG(na == nc && memcmp(a, c, na * sizeof(float)) == 0, "same config twice is not bitwise identical");
    CHECK_MSG(na == nr && memcmp(a, r, na * sizeof(float)) == 0, "resumed run differs from the uninterrupted one");
    size_t diff = 0;
    for (size_t i = 0; i + 1 < na && i + 1 < nb; i++) diff += a[i] != b[i];
    CHECK_MSG(diff > 0, "the stopped run should differ from the full one");
    printf("uninterrupted vs stopped-at-13-and-resumed: %zu values compared bitwise, equal\n", na - 1);
  }
  /* resume=auto skips a checkpoint that fails its CRC: the newest (step 13) corrupted, the run
   * resumes from the one before (step 10) and still ends bitwise as the uninterrupted one */
  char dd[] = "/tmp/ts_resume_d_XXXXXX", de[] = "/tmp/ts_resume_e_XXXXXX";
  CHECK(mkdtemp(dd) && mkdtemp(de));
  size_t nd = 0, nf = 0;
  float *d = run(dd, NULL, 13, &nd), *f = NULL;
  CHECK_OK(ts_ckpt_latest(dd, "ckpt", ck, sizeof ck));
  CHECK_MSG(strstr(ck, "ckpt-00000013.safetensors") != NULL, "%s", ck);
  FILE *fp = fopen(ck, "r+b");
  CHECK(fp != NULL);
  if (fp) { /* the last 4 data bytes inverted */
    unsigned char x[4];
    CHECK(fseek(fp, -4, SEEK_END) == 0 && fread(x, 1, 4, fp) == 4);
    for (int i = 0; i < 4; i++) x[i] ^= 0xff;
    CHECK(fseek(fp, -4, SEEK_END) == 0 && fwrite(x, 1, 4, fp) == 4);
    fclose(fp);
  }
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "cp %s %s/", ck, de); /* a series of one unreadable checkpoint */
  CHECK(system(cmd) == 0);
  f = run(dd, "auto", 0, &nf);
  CHECK(a && f);
  if (a && f) {
    CHECK_MSG(f[nf - 1] == 30 && na == nf && memcmp(a, f, na * sizeof(float)) == 0,
              "resume=auto past a corrupt checkpoint differs from the uninterrupted run");
    printf("resume=auto skipped the corrupt step-13 checkpoint, resumed at 10: bitwise equal\n");
  }
  { /* nothing readable: an error naming the newest and why, not a silent fresh start */
    char s1[300], s3[4200];
    snprintf(s1, sizeof s1, "checkpoint.dir=%s", de);
    snprintf(s3, sizeof s3, "data.path=%s", ts_test_fashion_mnist_dir());
    const char *sets[] = {s1, "checkpoint.resume=auto", s3};
    ts_config cfg;
    CHECK_OK(ts_config_load_string(k_yaml, "resume-test.yaml", sets, 3, &cfg));
    ts_trainer *t = NULL;
    CHECK(ts_trainer_create(&cfg, &t) == TS_EFORMAT && t == NULL);
    CHECK_MSG(strstr(ts_last_error(), "checkpoint.resume: auto: none of the 1 checkpoint in") &&
              strstr(ts_last_error(), "ckpt-00000013.safetensors: CRC-32 mismatch"), "%s", ts_last_error());
  }
  free(a); free(b); free(c); free(r); free(d); free(f);
  snprintf(cmd, sizeof cmd, "rm -rf %s %s %s %s %s", da, db, dc, dd, de);
  CHECK(system(cmd) == 0);
  return ts_test_finish("test_resume");
}
