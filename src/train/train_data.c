/* Sources for the trainer: which files a config's data section means. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_impl.h"

typedef struct {
  ts_source *base;
  int64_t off, n;
  int own;
} subset;

static int64_t sub_len(void *s) { return ((subset *)s)->n; }
static int sub_get(void *s, int64_t i, ts_sample *out) {
  subset *u = s;
  return ts_source_get(u->base, u->off + i, out);
}
static int64_t sub_label(void *s, int64_t i) {
  subset *u = s;
  return ts_source_label(u->base, u->off + i);
}
static int sub_classes(void *s) { return ts_source_num_classes(((subset *)s)->base); }
static int sub_sample_name(void *s, int64_t i, char *buf, size_t cap) {
  subset *u = s;
  return ts_source_sample_name(u->base, u->off + i, buf, cap) ? TS_OK : TS_ENOTFOUND;
}
static void sub_destroy(void *s) {
  if (((subset *)s)->own) ts_source_free(((subset *)s)->base);
  free(s);
}

static int make_subset(ts_source *base, int64_t off, int64_t n, int own, ts_source **out) {
  int64_t len = ts_source_len(base);
  if (off < 0 || n < 0 || off + n > len)
    return ts_error_set(TS_ERANGE, "subset [%lld,%lld) of a source of %lld samples", (long long)off,
                        (long long)(off + n), (long long)len);
  subset *u = malloc(sizeof *u);
  if (!u) return ts_error_set(TS_ENOMEM, "subset: out of memory");
  u->base = base;
  u->off = off;
  u->n = n;
  u->own = own;
  static const ts_source_vtable vt = {"subset",    sub_len,     sub_get,        sub_label,
                                      sub_classes, sub_destroy, sub_sample_name};
  int rc = ts_source_create(&vt, u, out);
  if (rc) free(u);
  return rc;
}

int ts__source_subset(ts_source *base, int64_t off, int64_t n, ts_source **out) {
  return make_subset(base, off, n, 1, out);
}

int ts__source_view(ts_source *base, int64_t off, int64_t n, ts_source **out) {
  return make_subset(base, off, n, 0, out);
}

static int records(const char *dir, const char *split, ts_source **out) {
  char pat[2200];
  snprintf(pat, sizeof pat, "%s/%s-*.tsr", dir, split);
  glob_t gl;
  int g = glob(pat, 0, NULL, &gl);
  if (g != 0) {
    if (g != GLOB_NOMATCH) globfree(&gl);
    return ts_error_set(TS_ENOTFOUND, "data.path: no record shards match %s", pat);
  }
  int rc = ts_source_records((const char *const *)gl.gl_pathv, (int)gl.gl_pathc, out);
  globfree(&gl);
  return rc;
}

static int limit(ts_source **s, int64_t lim) {
  if (!*s || lim <= 0 || lim >= ts_source_len(*s)) return TS_OK;
  ts_source *sub;
  int rc = ts__source_subset(*s, 0, lim, &sub);
  if (rc) return rc;
  *s = sub;
  return TS_OK;
}

/* data.path is a folder for every data set but text, which reads one file: the wrong kind is
 * said as such, before a source looks for files under a file or opens a folder as a file. */
static int check_path_kind(const ts_config *cfg) {
  const char *path = cfg->data.path;
  struct stat st;
  if (!path[0] || stat(path, &st) != 0) return TS_OK; /* missing: the source names what it looked for */
  int want_dir = cfg->data.name != TS_DATA_TEXT;
  if (want_dir && !S_ISDIR(st.st_mode))
    return ts_error_set(TS_ECONFIG, "%s: data.path: '%s' is a file, but data.name '%s' reads a folder",
                        cfg->source[0] ? cfg->source : "config", path, ts_data_kind_name(cfg->data.name));
  if (!want_dir && S_ISDIR(st.st_mode))
    return ts_error_set(TS_ECONFIG, "%s: data.path: '%s' is a folder, but data.name '%s' reads one file",
                        cfg->source[0] ? cfg->source : "config", path, ts_data_kind_name(cfg->data.name));
  return TS_OK;
}

/* Where a missing data set comes from, said beside the file that was not found. */
static const char *missing_hint(ts_data_kind k) {
  switch (k) {
    case TS_DATA_FASHION_MNIST:
      return "Fashion-MNIST comes from Debian's package dataset-fashion-mnist (scripts/install-deps.sh "
             "installs it; apt-get install dataset-fashion-mnist) into /usr/share/datasets/fashion-mnist: "
             "set data.path to that folder";
    case TS_DATA_MNIST:
      return "data.path is a folder of the IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, "
             "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each may be .gz)";
    case TS_DATA_CIFAR10:
      return "data.path is the folder of CIFAR-10's binary version (cifar-10-batches-bin: data_batch_1.bin .. "
             "data_batch_5.bin, test_batch.bin)";
    case TS_DATA_CIFAR100:
      return "data.path is the folder of CIFAR-100's binary version (cifar-100-binary: train.bin, test.bin)";
    case TS_DATA_IMAGE_FOLDER:
      return "data.path is a folder with train/<class>/<image>.png|.jpg (and optionally test/<class>/...)";
    case TS_DATA_RECORDS:
      return "data.path is a folder of record shards (<path>/train-NNNNN-of-NNNNN.tsr, <path>/test-...), written by "
             "`tessera data convert --output <path>/train`";
    case TS_DATA_TEXT:
      return "data.path is one text file, read as bytes (e.g. Tiny Shakespeare's input.txt)";
    default: return NULL;
  }
}

static int file_sources(const ts_config *cfg, ts_source **train, ts_source **test) {
  *train = *test = NULL;
  const char *path = cfg->data.path;
  const char *trs = cfg->data.train_split[0] ? cfg->data.train_split : NULL;
  const char *tes = cfg->data.test_split[0] ? cfg->data.test_split : NULL;
  char sub[2200];
  int rc = check_path_kind(cfg);
  if (rc) return rc;
  switch (cfg->data.name) {
    case TS_DATA_FASHION_MNIST:
    case TS_DATA_MNIST:
      rc = ts_source_mnist(path, trs ? trs : "train", train);
      if (!rc) rc = ts_source_mnist(path, tes ? tes : "t10k", test);
      break;
    case TS_DATA_CIFAR10:
    case TS_DATA_CIFAR100: {
      int c100 = cfg->data.name == TS_DATA_CIFAR100;
      rc = ts_source_cifar(path, c100, 1, train);
      if (!rc) rc = ts_source_cifar(path, c100, 0, test);
      break;
    }
    case TS_DATA_IMAGE_FOLDER: {
      snprintf(sub, sizeof sub, "%s/%s", path, trs ? trs : "train");
      rc = ts_source_image_folder(sub, train);
      if (rc) break;
      /* the test split is optional; if there, its classes are the training split's, by name */
      snprintf(sub, sizeof sub, "%s/%s", path, tes ? tes : "test");
      struct stat st;
      if (stat(sub, &st) != 0) break;
      int nc;
      const char *const *names = ts_source_class_names(*train, &nc);
      rc = ts_source_image_folder_classes(sub, names, nc, test);
      break;
    }
    case TS_DATA_RECORDS:
      rc = records(path, trs ? trs : "train", train);
      if (!rc && records(path, tes ? tes : "test", test) != TS_OK) *test = NULL;
      break;
    case TS_DATA_TEXT: {
      ts_source *all;
      rc = ts_source_text(path, cfg->data.seq_len, cfg->data.stride, &all);
      if (rc) break;
      int64_t n = ts_source_len(all), nv = (int64_t)(cfg->data.val_fraction * (double)n);
      if (nv <= 0) {
        *train = all;
        break;
      }
      /* two views of one source: the second holds its own handle */
      ts_source *again;
      rc = ts_source_text(path, cfg->data.seq_len, cfg->data.stride, &again);
      if (!rc) rc = ts__source_subset(all, 0, n - nv, train);
      if (!rc) rc = ts__source_subset(again, n - nv, nv, test);
      break;
    }
    default:
      rc = ts_error_set(TS_ECONFIG, "data.name: unsupported data set %d", (int)cfg->data.name);
  }
  if (!rc) rc = limit(train, cfg->data.train_limit);
  if (!rc) rc = limit(test, cfg->data.test_limit);
  if (rc) {
    ts_source_free(*train);
    ts_source_free(*test);
    *train = *test = NULL;
    rc = ts_error_wrap(rc, "%s: data", cfg->source[0] ? cfg->source : "config");
    struct stat st;
    const char *hint = (rc == TS_ENOTFOUND || (path[0] && stat(path, &st) != 0)) ? missing_hint(cfg->data.name) : NULL;
    if (hint) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", ts_last_error());
      ts_error_set(rc, "%s; %s", msg, hint);
    }
    return rc;
  }
  return TS_OK;
}

/* A split named "source:NAME" is the source registered as NAME (ts_source_register, data.h); the
 * other split comes from the files of data.name / data.path as before, or is absent when the
 * training split is registered and data.test_split is empty. */
static const char *registered(const char *split) {
  size_t n = strlen(TS_SOURCE_SCHEME);
  return strncmp(split, TS_SOURCE_SCHEME, n) ? NULL : split + n;
}

static int lookup_split(const ts_config *cfg, const char *key, const char *name, int64_t lim, ts_source **out) {
  int rc = ts_source_lookup(name, out);
  if (!rc) rc = limit(out, lim);
  if (rc) {
    ts_source_free(*out);
    *out = NULL;
    return ts_error_wrap(rc, "%s: %s", cfg->source[0] ? cfg->source : "config", key);
  }
  return TS_OK;
}

int ts__train_sources(const ts_config *cfg, ts_source **train, ts_source **test) {
  const char *rtr = registered(cfg->data.train_split), *rte = registered(cfg->data.test_split);
  if (!rtr && !rte) return file_sources(cfg, train, test);
  *train = *test = NULL;
  int rc = TS_OK;
  if (!rtr || (!rte && cfg->data.test_split[0])) { /* one split from files */
    ts_config c = *cfg; /* a shallow copy: only its split names change, nothing of it is freed */
    if (rtr) snprintf(c.data.train_split, sizeof c.data.train_split, "%s", c.data.test_split);
    if (rte) c.data.test_split[0] = 0;
    rc = file_sources(&c, train, test);
    if (!rc && rtr) {
      ts_source_free(*train);
      *train = NULL;
    }
    if (!rc && rte) {
      ts_source_free(*test);
      *test = NULL;
    }
  }
  if (!rc && rtr) rc = lookup_split(cfg, "data.train_split", rtr, cfg->data.train_limit, train);
  if (!rc && rte) rc = lookup_split(cfg, "data.test_split", rte, cfg->data.test_limit, test);
  if (rc) {
    ts_source_free(*train);
    ts_source_free(*test);
    *train = *test = NULL;
  }
  return rc;
}

int ts_config_sources(const ts_config *cfg, ts_source **train, ts_source **test) {
  return ts__train_sources(cfg, train, test);
}
