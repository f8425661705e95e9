/* `tessera data`: convert a data set into Tessera record shards, and inspect a shard file.
 * Exit status: 0 success, 2 usage errors, 1 runtime errors (bad or missing data). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "tessera/data.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera data convert --source KIND --input PATH --output PREFIX --shards N\n"
          "                            [--split train|test] [--seq-len N] [--stride N]\n"
          "       tessera data inspect FILE.tsr [--json]\n"
          "convert  reads a data set and writes it as N record shards PREFIX-00000-of-0000N.tsr\n"
          "         (sample i goes to shard i %% N; files appear only when all are complete).\n"
          "         KIND is one of:\n"
          "           cifar10       PATH = cifar-10-batches-bin/ (data_batch_1..5.bin, test_batch.bin)\n"
          "           cifar100      PATH = cifar-100-binary/ (train.bin, test.bin)\n"
          "           mnist         PATH = folder of *-images-idx3-ubyte[.gz] (default split train)\n"
          "           image-folder  PATH = root/<class>/<image>.{png,jpg,jpeg} (--split ignored)\n"
          "           text          PATH = any file, bytes as tokens; needs --seq-len (--stride\n"
          "                         defaults to the sequence length)\n"
          "inspect  verifies every record of one shard file (checksums) and prints its counts,\n"
          "         tensor shapes and label histogram (--json for a JSON object).\n"
          "examples:\n"
          "  tessera data convert --source mnist --input %s --split train \\\n"
          "      --output /tmp/fmnist/train --shards 4\n"
          "  tessera data inspect /tmp/fmnist/train-00000-of-00004.tsr\n",
          TS_FASHION_MNIST_DIR);
  return f == stderr ? 2 : 0;
}

/* Parses a positive int option value; 0 on success. */
static int parse_pos(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v <= 0 || v > 1000000000) return -1;
  *out = (int)v;
  return 0;
}

static int cmd_convert(int argc, char **argv) {
  const char *source = NULL, *input = NULL, *output = NULL, *split = "train";
  int shards = 0, seq_len = 0, stride = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
#define OPT(name, stmt)                                                          \
  if (!strcmp(a, name)) {                                                        \
    if (!v) return ts_cli_fail(2, "data convert: option %s needs a value", name); \
    stmt;                                                                        \
    i++;                                                                         \
    continue;                                                                    \
  }
#define INTOPT(name, var)                                                                                  \
  OPT(name, if (parse_pos(v, &var)) return ts_cli_fail(2, "data convert: %s must be a positive integer, not '%s'", \
                                                       name, v))
    OPT("--source", source = v)
    OPT("--input", input = v)
    OPT("--output", output = v)
    OPT("--split", split = v)
    INTOPT("--shards", shards)
    INTOPT("--seq-len", seq_len)
    INTOPT("--stride", stride)
#undef INTOPT
#undef OPT
    return ts_cli_fail(2, "data convert: unknown option '%s' (see tessera data --help)", a);
  }
  if (!source) return ts_cli_fail(2, "data convert: --source is required (cifar10, cifar100, mnist, image-folder, text)");
  if (!input) return ts_cli_fail(2, "data convert: --input is required");
  if (!output) return ts_cli_fail(2, "data convert: --output is required (a path prefix for the shard files)");
  if (!shards) return ts_cli_fail(2, "data convert: --shards is required");
  if (shards > 99999) return ts_cli_fail(2, "data convert: --shards %d is more than 99999", shards);
  int train = !strcmp(split, "train");
  if (!train && strcmp(split, "test"))
    return ts_cli_fail(2, "data convert: --split must be train or test, not '%s'", split);
  int is_text = !strcmp(source, "text");
  if (is_text && !seq_len) return ts_cli_fail(2, "data convert: --source text needs --seq-len");
  if (!is_text && (seq_len || stride))
    return ts_cli_fail(2, "data convert: --seq-len and --stride apply to --source text only");
  int e = ts_cli_check_exists(input, "cannot open the input");
  if (e) return e;
  ts_source *src = NULL;
  int rc;
  if (!strcmp(source, "cifar10")) rc = ts_source_cifar(input, 0, train, &src);
  else if (!strcmp(source, "cifar100")) rc = ts_source_cifar(input, 1, train, &src);
  else if (!strcmp(source, "mnist")) rc = ts_source_mnist(input, train ? "train" : "t10k", &src);
  else if (!strcmp(source, "image-folder")) rc = ts_source_image_folder(input, &src);
  else if (is_text) rc = ts_source_text(input, seq_len, stride, &src);
  else
    return ts_cli_fail(2, "data convert: unknown --source '%s' (cifar10, cifar100, mnist, image-folder, text)", source);
  if (rc) return ts_cli_fail(ts_cli_exit_code(rc), "%s", ts_last_error());
  /* the folders of the prefix (data/ in `--output data/fm-train`) are created like mkdir -p */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", output);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = 0;
    for (char *c = dir + 1;; c++) {
      int end = *c == 0;
      if (*c == '/' || end) {
        *c = 0;
        struct stat st;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
          int err = errno;
          ts_source_free(src);
          return ts_cli_fail(1, "data convert: --output %s: cannot create the folder '%s': %s", output, dir,
                             strerror(err));
        }
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
          ts_source_free(src);
          return ts_cli_fail(1, "data convert: --output %s: '%s' is not a folder", output, dir);
        }
        if (end) break;
        *c = '/';
      }
    }
  }
  double t0 = ts_time_now();
  char **paths = NULL;
  rc = ts_records_write(src, output, shards, &paths);
  int64_t n = ts_source_len(src);
  ts_source_free(src);
  if (rc) return ts_cli_fail(1, "%s", ts_last_error());
  for (int s = 0; s < shards; s++) {
    printf("%s\n", paths[s]);
    free(paths[s]);
  }
  free(paths);
  printf("wrote %lld samples from %s into %d shard%s in %.1f s\n", (long long)n, source, shards,
         shards == 1 ? "" : "s", ts_time_now() - t0);
  return 0;
}

#define MAX_VARIANTS 8

typedef struct {
  ts_dtype dt;
  ts_shape sh;
  int64_t count;
} variant;

/* Adds (dt, sh) to the table; returns 0 if it was full and the shape new. */
static int add_variant(variant *v, int *nv, ts_dtype dt, const ts_shape *sh) {
  for (int i = 0; i < *nv; i++)
    if (v[i].dt == dt && ts_shape_equal(&v[i].sh, sh)) {
      v[i].count++;
      return 1;
    }
  if (*nv == MAX_VARIANTS) return 0;
  v[*nv].dt = dt;
  v[*nv].sh = *sh;
  v[*nv].count = 1;
  (*nv)++;
  return 1;
}

static cJSON *variants_json(const variant *v, int nv) {
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; i < nv; i++) {
    cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "dtype", ts_dtype_name(v[i].dt));
    for (int k = 0; k < v[i].sh.ndim; k++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)v[i].sh.dims[k]));
    cJSON_AddItemToObject(o, "shape", sh);
    cJSON_AddNumberToObject(o, "count", (double)v[i].count);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}

static void variants_print(const char *what, const variant *v, int nv, int more) {
  printf("%-9s", what);
  if (!nv) printf(" none");
  for (int i = 0; i < nv; i++) {
    char b[160];
    printf("%s %s %s x%lld", i ? "," : "", ts_dtype_name(v[i].dt), ts_shape_str(&v[i].sh, b, sizeof b),
           (long long)v[i].count);
  }
  printf("%s\n", more ? ", and more shapes" : "");
}

#define MAX_HIST 100000

static int cmd_inspect(int argc, char **argv) {
  const char *file = NULL;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--json")) json = 1;
    else if (a[0] == '-' && a[1]) return ts_cli_fail(2, "data inspect: unknown option '%s' (see tessera data --help)", a);
    else if (file) return ts_cli_fail(2, "data inspect: one file at a time ('%s' and '%s' given)", file, a);
    else file = a;
  }
  if (!file) return ts_cli_fail(2, "data inspect: which file? (tessera data inspect FILE.tsr)");
  int e = ts_cli_check_exists(file, "cannot open the record file");
  if (e) return e;
  ts_records_info info;
  if (ts_records_info_read(file, &info)) return ts_cli_fail(1, "%s", ts_last_error());
  ts_source *src;
  if (ts_source_records_shard(file, &src)) return ts_cli_fail(1, "%s", ts_last_error());
  int64_t n = ts_source_len(src);
  variant dv[MAX_VARIANTS], tv[MAX_VARIANTS];
  int ndv = 0, ntv = 0, dmore = 0, tmore = 0;
  int64_t unlabelled = 0, max_label = -1;
  int64_t *hist = calloc(MAX_HIST, sizeof *hist);
  if (!hist) {
    ts_source_free(src);
    return ts_cli_fail(1, "data inspect: out of memory");
  }
  int rc = 0;
  for (int64_t i = 0; i < n; i++) {
    ts_sample s;
    if (ts_source_get(src, i, &s)) {
      rc = ts_cli_fail(1, "%s", ts_last_error());
      break;
    }
    if (!add_variant(dv, &ndv, s.data.dtype, &s.data.shape)) dmore = 1;
    if (s.target.data) {
      if (!add_variant(tv, &ntv, s.target.dtype, &s.target.shape)) tmore = 1;
    }
    if (s.label < 0) unlabelled++;
    else if (s.label < MAX_HIST) hist[s.label]++;
    if (s.label > max_label) max_label = s.label;
    ts_sample_free(&s);
  }
  ts_source_free(src);
  if (rc) {
    free(hist);
    return rc;
  }
  int64_t nbins = max_label + 1;
  if (info.num_classes > nbins) nbins = info.num_classes;
  if (nbins > MAX_HIST) nbins = MAX_HIST;
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddNumberToObject(o, "version", info.version);
    cJSON_AddNumberToObject(o, "shard", info.shard);
    cJSON_AddNumberToObject(o, "num_shards", info.num_shards);
    cJSON_AddNumberToObject(o, "records", (double)info.count);
    cJSON_AddNumberToObject(o, "total", (double)info.total);
    cJSON_AddStringToObject(o, "source", info.kind);
    cJSON_AddNumberToObject(o, "num_classes", info.num_classes);
    cJSON_AddNumberToObject(o, "file_size", (double)info.file_size);
    cJSON_AddItemToObject(o, "data", variants_json(dv, ndv));
    cJSON_AddItemToObject(o, "target", variants_json(tv, ntv));
    cJSON_AddBoolToObject(o, "more_shapes", dmore || tmore);
    cJSON *h = cJSON_CreateArray();
    for (int64_t c = 0; c < nbins; c++) cJSON_AddItemToArray(h, cJSON_CreateNumber((double)hist[c]));
    cJSON_AddItemToObject(o, "labels", h);
    cJSON_AddNumberToObject(o, "unlabelled", (double)unlabelled);
    char *txt = cJSON_Print(o);
    if (txt) printf("%s\n", txt);
    free(txt);
    cJSON_Delete(o);
    free(hist);
    return txt ? 0 : ts_cli_fail(1, "data inspect: out of memory");
  }
  printf("file     %s\n", file);
  printf("format   Tessera records v%d, shard %d of %d, %lld bytes\n", info.version, info.shard, info.num_shards,
         (long long)info.file_size);
  printf("records  %lld (of %lld in the set), every checksum verified\n", (long long)info.count,
         (long long)info.total);
  printf("source   %s, %d classes%s\n", info.kind[0] ? info.kind : "?", info.num_classes,
         info.num_classes ? "" : " (unknown)");
  variants_print("data", dv, ndv, dmore);
  variants_print("target", tv, ntv, tmore);
  if (nbins > 0) {
    printf("labels  ");
    for (int64_t c = 0; c < nbins; c++) printf(" %lld:%lld", (long long)c, (long long)hist[c]);
    printf("\n");
  }
  if (unlabelled) printf("unlabelled %lld\n", (long long)unlabelled);
  free(hist);
  return 0;
}

int ts_cli_data(int argc, char **argv) {
  if (argc < 1) return ts_cli_fail(2, "data: which subcommand? (convert, inspect; see tessera data --help)");
  const char *sub = argv[0];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) return usage(stdout);
  if (!strcmp(sub, "convert")) return cmd_convert(argc - 1, argv + 1);
  if (!strcmp(sub, "inspect")) return cmd_inspect(argc - 1, argv + 1);
  return ts_cli_fail(2, "data: unknown subcommand '%s' (convert, inspect; see tessera data --help)", sub);
}
