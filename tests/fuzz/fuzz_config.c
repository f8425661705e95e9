/* libFuzzer target for the YAML config loader (src/train/config.c, config_schema.c,
 * config_validate.c, config_lists.c). The bytes up to the first NUL are a config file's text;
 * every NUL-separated piece after it is a --set override ("key.path=value"):
 *   ts_config_load_string(text, overrides) (defaults, the text, the overrides, validation).
 * A config that loads is read back through every key (ts_config_get), hashed, converted for the
 * trainer (optimizer, loss scale, LR schedule, transforms, models, distribution), and dumped as
 * YAML (ts_config_dump_string), which must load again to a config that dumps to the same text and
 * hashes the same. Each override is also applied alone to a default config (ts_config_override)
 * and validated (ts_config_validate).
 * Invariants: a failure is a negative status with a message, never a crash, a leak or an abort.
 * Built by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/config.h"
#include "train/config_dist.h"

#define MAX_OVERRIDES 8

static void check_failure(int rc) {
  if (rc >= 0 || !ts_last_error()[0]) {
    fprintf(stderr, "fuzz_config: failure status %d without a message\n", rc);
    abort();
  }
}

static void exercise(const ts_config *cfg) {
  char buf[8192];
  for (int i = 0; i < ts_config_key_count(); i++) {
    ts_config_key k;
    if (ts_config_key_info(i, &k)) abort();
    ts_error_set(TS_OK, "%s", "");
    int rc = ts_config_get(cfg, k.path, buf, sizeof buf);
    if (rc && rc != TS_ERANGE) abort(); /* every key of the table has a value */
    if (rc) check_failure(rc);
  }
  (void)ts_config_hash(cfg);
  ts_optim_config oc;
  ts_error_set(TS_OK, "%s", "");
  int rc = ts_config_optim(cfg, &oc);
  if (rc) check_failure(rc);
  ts_loss_scale_config ls;
  ts_config_loss_scale(cfg, &ls);
  static const int64_t spe[] = {1, 7, 1000};
  for (int i = 0; i < 3; i++) {
    ts_lr_schedule sch;
    (void)ts_config_total_steps(cfg, spe[i]);
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_config_lr_schedule(cfg, spe[i], &sch))) check_failure(rc);
  }
  ts_transform tf[TS_CFG_MAX_TRANSFORMS];
  for (int train = 0; train < 2; train++) {
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_config_transforms(cfg, train, tf, TS_CFG_MAX_TRANSFORMS)) < 0) check_failure(rc);
  }
  ts_mlp_config mlp;
  ts_lenet5_config lenet;
  ts_convnet_config conv;
  ts_resnet_config res;
  ts_gpt_config gpt;
  ts_dist_config dist;
  ts_config_mlp(cfg, &mlp);
  ts_config_lenet5(cfg, &lenet);
  ts_config_convnet(cfg, &conv);
  ts_config_resnet(cfg, &res);
  ts_config_gpt(cfg, &gpt);
  ts_config_dist(cfg, &dist);
}

static void round_trip(const ts_config *cfg) {
  char *dump = NULL, *dump2 = NULL;
  if (ts_config_dump_string(cfg, &dump)) abort();
  ts_config again;
  ts_error_set(TS_OK, "%s", "");
  if (ts_config_load_string(dump, "dump.yaml", NULL, 0, &again)) {
    fprintf(stderr, "fuzz_config: the dump of a valid config does not load: %s\n--- dump:\n%s", ts_last_error(), dump);
    abort();
  }
  if (ts_config_dump_string(&again, &dump2)) abort();
  if (strcmp(dump, dump2) || ts_config_hash(cfg) != ts_config_hash(&again)) {
    fprintf(stderr, "fuzz_config: a config dumped and loaded again differs\n--- first:\n%s--- second:\n%s", dump,
            dump2);
    abort();
  }
  free(dump);
  free(dump2);
  ts_config_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) return 0;
  memcpy(t, data, size);
  t[size] = 0;
  const char *ov[MAX_OVERRIDES];
  int nov = 0;
  for (size_t i = strlen(t); i < size && nov < MAX_OVERRIDES;) { /* t[i] is a NUL: a piece follows */
    ov[nov++] = t + i + 1;
    i += 1 + strlen(t + i + 1);
  }

  ts_config cfg;
  ts_error_set(TS_OK, "%s", "");
  int rc = ts_config_load_string(t, "fuzz.yaml", ov, nov, &cfg);
  if (rc) {
    check_failure(rc);
  } else {
    exercise(&cfg);
    round_trip(&cfg);
  }
  ts_config_free(&cfg);
  for (int i = 0; i < nov; i++) {
    ts_config_defaults(&cfg);
    ts_error_set(TS_OK, "%s", "");
    if ((rc = ts_config_override(&cfg, ov[i])) || (rc = ts_config_validate(&cfg))) check_failure(rc);
    ts_config_free(&cfg);
  }
  free(t);
  return 0;
}
