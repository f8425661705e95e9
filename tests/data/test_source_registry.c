/* Named sources (ts_source_register / lookup / unregister) and source reference counts: a source
 * is destroyed at its last reference only, the table refuses a taken name, and a config split
 * "source:NAME" (ts_config_sources, the trainer's sources) is the registered source, with the
 * other split from files or absent, train_limit applied, and an unknown name an error naming it
 * and the key. */
#include <stdio.h>
#include <string.h>

#include "tessera/config.h"
#include "tessera/data.h"
#include "tessera/train.h"
#include "test_util.h"

typedef struct {
  int64_t n;
  int destroyed;
} mine;

static int64_t m_len(void *s) { return ((mine *)s)->n; }
static int m_get(void *s, int64_t i, ts_sample *out) {
  (void)s;
  int rc = ts_tensor_init(&out->data, TS_F32, ts_shape1(2));
  if (rc) return rc;
  ((float *)out->data.data)[0] = (float)i;
  ((float *)out->data.data)[1] = -(float)i;
  out->label = i % 3;
  return TS_OK;
}
static void m_destroy(void *s) { ((mine *)s)->destroyed++; }

static void test_refs_and_table(void) {
  mine u = {10, 0};
  ts_source_vtable vt = {"mine", m_len, m_get, NULL, NULL, m_destroy, NULL};
  ts_source *s, *t;
  CHECK_OK(ts_source_create(&vt, &u, &s));
  CHECK(ts_source_ref(s) == s);
  ts_source_free(s); /* one of two references */
  CHECK(u.destroyed == 0);
  CHECK_OK(ts_source_register("mine-1", s));
  CHECK(ts_source_register("mine-1", s) == TS_EINVAL && strstr(ts_last_error(), "'mine-1'"));
  CHECK(ts_source_register("", s) == TS_EINVAL);
  ts_source_free(s); /* the table's reference keeps it */
  CHECK(u.destroyed == 0);
  CHECK_OK(ts_source_lookup("mine-1", &t));
  CHECK(t == s && ts_source_len(t) == 10);
  CHECK(ts_source_lookup("nobody", &s) == TS_ENOTFOUND && s == NULL && strstr(ts_last_error(), "'nobody'"));
  CHECK_OK(ts_source_unregister("mine-1"));
  CHECK(u.destroyed == 0); /* the lookup's reference */
  CHECK(ts_source_unregister("mine-1") == TS_ENOTFOUND);
  ts_source_free(t);
  CHECK(u.destroyed == 1);
}

static void test_config_split(void) {
  mine u = {10, 0};
  ts_source_vtable vt = {"mine", m_len, m_get, NULL, NULL, m_destroy, NULL};
  ts_source *s, *tr = NULL, *te = NULL;
  CHECK_OK(ts_source_create(&vt, &u, &s));
  CHECK_OK(ts_source_register("cfg-src", s));
  ts_source_free(s);
  ts_config cfg;
  ts_config_defaults(&cfg);
  CHECK_OK(ts_config_set(&cfg, "data.name", "records"));
  CHECK_OK(ts_config_set(&cfg, "data.path", "unused"));
  CHECK_OK(ts_config_set(&cfg, "data.train_split", "source:cfg-src"));
  CHECK_OK(ts_config_set(&cfg, "data.train_limit", "4"));
  CHECK_OK(ts_config_sources(&cfg, &tr, &te));
  CHECK(tr && te == NULL && ts_source_len(tr) == 4); /* no test split given: none, no files opened */
  ts_sample smp;
  CHECK_OK(ts_source_get(tr, 3, &smp));
  CHECK(((float *)smp.data.data)[1] == -3.0f && smp.label == 0);
  ts_sample_free(&smp);
  ts_source_free(tr);
  /* both splits registered */
  CHECK_OK(ts_config_set(&cfg, "data.test_split", "source:cfg-src"));
  CHECK_OK(ts_config_sources(&cfg, &tr, &te));
  CHECK(tr && te && ts_source_len(te) == 10);
  ts_source_free(tr);
  ts_source_free(te);
  CHECK_OK(ts_source_unregister("cfg-src"));
  CHECK(u.destroyed == 1);
  /* gone: the error names the key and the name */
  CHECK(ts_config_sources(&cfg, &tr, &te) == TS_ENOTFOUND && tr == NULL && te == NULL);
  CHECK(strstr(ts_last_error(), "data.train_split") && strstr(ts_last_error(), "'cfg-src'"));
  ts_config_free(&cfg);
}

int main(void) {
  test_refs_and_table();
  test_config_split();
  return ts_test_finish("test_source_registry");
}
