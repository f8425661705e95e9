/* Configs that tests/fuzz/fuzz_config.c found mishandled (src/train/config*.c), each now refused
 * with a message naming the key (the inputs are also in tests/fuzz/corpus/config/):
 *  - optimizer.schedule.step_size in epochs (up to 1e18) times the steps per epoch overflowed
 *    int64 in ts_config_lr_schedule (signed overflow; the step size wrapped). */
#include <string.h>

#include "tessera/config.h"
#include "test_util.h"

int main(void) {
  ts_config cfg;
  ts_lr_schedule sch;
  CHECK_OK(ts_config_load_string("optimizer:\n  schedule:\n    name: step\n    unit: epochs\n"
                                 "    step_size: 1000000000000000000\n", "big.yaml", NULL, 0, &cfg));
  int rc = ts_config_lr_schedule(&cfg, 1000, &sch);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), "big.yaml: optimizer.schedule.step_size: 1000000000000000000 "
                                                        "epochs x 1000 steps per epoch is more steps"),
            "%d %s", rc, ts_last_error());
  CHECK_OK(ts_config_lr_schedule(&cfg, 9, &sch)); /* 9e18 steps still fit */
  CHECK(sch.step_size == 9000000000000000000ll);
  ts_config_free(&cfg);

  const char *ms[] = {"optimizer.schedule={name: multistep, unit: epochs, milestones: [1, 2147483647]}"};
  CHECK_OK(ts_config_load_string("", "ms.yaml", ms, 1, &cfg));
  rc = ts_config_lr_schedule(&cfg, (int64_t)1 << 33, &sch);
  CHECK_MSG(rc == TS_ECONFIG && strstr(ts_last_error(), "optimizer.schedule.milestones[1]: 2147483647 epochs"), "%d %s",
            rc, ts_last_error());
  CHECK_OK(ts_config_lr_schedule(&cfg, 1000, &sch));
  CHECK(sch.milestones[1] == 2147483647000ll);
  ts_config_free(&cfg);
  return ts_test_finish("test_config_inputs");
}
