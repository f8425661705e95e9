/* `tessera ckpt`: inspect a checkpoint (training position, model, config hash, tensor table; of
 * a sliced one the manifest, its files and every tensor's pieces), export its parameters as a
 * plain safetensors state_dict, verify it (hashes, checksums, pieces), merge a sliced one into
 * the whole file, or re-cut it for another layout (reshard). docs/checkpoints.md. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_files.h"
#include "cli.h"
#include "tessera/checkpoint.h"
#include "tessera/tessera.h"
#include "tessera/train.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera ckpt inspect FILE|DIR [--json] [--config]\n"
          "       tessera ckpt export FILE|DIR -o OUT [--overwrite]\n"
          "       tessera ckpt verify FILE|DIR\n"
          "       tessera ckpt merge DIR -o OUT.safetensors [--overwrite]\n"
          "       tessera ckpt reshard DIR -n N [--config FILE] [--set key=value ...] [--strategy FILE] -o DIR2\n"
          "                           [--overwrite]\n"
          "inspect  prints the step, epoch, model, config hash and the table of tensors; of a sliced\n"
          "         checkpoint (a directory) also the layout, the files and every tensor's pieces\n"
          "         (--json: the same as one JSON object, a sliced one's manifest; --config: the YAML)\n"
          "export   writes the parameters and buffers only, under their PyTorch names, to OUT (of a\n"
          "         sliced checkpoint too: each tensor merged from its pieces as it is read)\n"
          "verify   checks a whole file's checksums, or a sliced checkpoint's files against the\n"
          "         manifest (sizes, SHA-256), their checksums and pieces, and that every tensor is\n"
          "         covered once; exit 1 naming the first file at fault\n"
          "merge    writes the whole checkpoint of a sliced one: the file checkpoint.format whole\n"
          "         writes at that step (its config with checkpoint.format: whole)\n"
          "reshard  re-cuts a sliced checkpoint for N ranks under its config (or --config FILE) with the --set changes\n"
          "         (parallel.mode, strategies, sharding stage, pipeline stages...) into DIR2, a\n"
          "         sliced checkpoint such a job resumes from (checkpoint.resume=DIR2); the old\n"
          "         layout's strategies stay unless replaced (--set parallel.strategies={} for none)\n"
          "-o OUT   never the checkpoint read, inside it or holding it; an existing OUT is left as it is unless\n"
          "         it is a checkpoint Tessera wrote and --overwrite is given (then replaced whole, atomically)\n"
          "example: tessera ckpt inspect checkpoints/resnet20_fashion/ckpt-00007035.safetensors\n"
          "         tessera ckpt export checkpoints/mlp_fashion/ckpt-00002340.safetensors -o "
          "mlp.safetensors\n"
          "         tessera ckpt reshard checkpoints/gpt_tp/ckpt-00000500 -n 2 --set "
          "parallel.mode=data_parallel --set 'parallel.strategies={}' -o gpt_dp2\n");
  return f == stderr ? 2 : 0;
}

static void human_bytes(uint64_t b, char *buf, size_t cap) {
  if (b >= (1ull << 30))
    snprintf(buf, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, cap, "%.2f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024)
    snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
  else
    snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

static cJSON *raw_num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cJSON *raw_num(const char *fmt, ...) {
  char b[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  return cJSON_CreateRaw(b);
}

static int inspect_json(const char *path, const ts_st_file *f, const ts_ckpt_info *in) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return ts_cli_fail(1, "ckpt inspect: out of memory");
  cJSON_AddStringToObject(o, "path", path);
  cJSON_AddStringToObject(o, "format", in->format);
  cJSON_AddStringToObject(o, "file", ts_st_is_mindspore(f) ? "mindspore" : "safetensors");
  cJSON_AddStringToObject(o, "version", in->version);
  cJSON_AddStringToObject(o, "model", in->model);
  cJSON_AddItemToObject(o, "step", raw_num("%" PRId64, in->pos.step));
  cJSON_AddItemToObject(o, "epoch", raw_num("%" PRId64, in->pos.epoch));
  cJSON_AddItemToObject(o, "batch_index", raw_num("%" PRId64, in->pos.batch_index));
  if (in->has_config_hash) {
    char h[32];
    snprintf(h, sizeof h, "%016" PRIx64, in->config_hash);
    cJSON_AddStringToObject(o, "config_hash", h);
  } else {
    cJSON_AddNullToObject(o, "config_hash");
  }
  cJSON_AddItemToObject(o, "seed", raw_num("%" PRIu64, in->pos.seed));
  cJSON_AddItemToObject(o, "rng_counter", raw_num("%" PRIu64, in->pos.rng_counter));
  cJSON_AddNumberToObject(o, "loss_scale", in->pos.loss_scale);
  cJSON_AddItemToObject(o, "loss_scale_growth_tracker",
                        raw_num("%" PRId64, in->pos.loss_scale_growth_tracker));
  cJSON_AddItemToObject(o, "num_params", raw_num("%" PRId64, in->param_numel));
  cJSON_AddItemToObject(o, "num_buffers", raw_num("%" PRId64, in->state_numel));
  cJSON_AddItemToObject(o, "num_optimizer_state", raw_num("%" PRId64, in->optim_numel));
  cJSON_AddItemToObject(o, "data_bytes", raw_num("%" PRIu64, in->data_bytes));
  cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
  for (int i = 0; i < ts_st_count(f); i++) {
    ts_tensor v;
    if (ts_st_get(f, i, &v)) continue;
    cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray();
    cJSON_AddStringToObject(t, "name", ts_st_name(f, i));
    cJSON_AddStringToObject(t, "dtype", ts_st_dtype_name(v.dtype));
    for (int d = 0; d < v.shape.ndim; d++)
      cJSON_AddItemToArray(sh, raw_num("%" PRId64, v.shape.dims[d]));
    cJSON_AddItemToObject(t, "shape", sh);
    cJSON_AddItemToObject(t, "bytes", raw_num("%zu", ts_tensor_nbytes(&v)));
    cJSON_AddItemToArray(ts, t);
  }
  if (in->config_yaml)
    cJSON_AddStringToObject(o, "config", in->config_yaml);
  else
    cJSON_AddNullToObject(o, "config");
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  if (!s) return ts_cli_fail(1, "ckpt inspect: out of memory");
  puts(s);
  cJSON_free(s);
  return 0;
}

static int inspect_text(const char *path, const ts_st_file *f, const ts_ckpt_info *in) {
  char hb[32];
  human_bytes(in->data_bytes, hb, sizeof hb);
  printf("checkpoint   %s (%d tensors, %s)\n", path, in->ntensors, hb);
  if (!in->is_tessera) {
    printf("format       %s (no tessera metadata: parameters only)\n",
           ts_st_is_mindspore(f) ? "MindSpore checkpoint (.ckpt)" : "plain safetensors");
  } else {
    printf("format       %s%s%s\n", in->format, in->version[0] ? ", written by tessera " : "",
           in->version);
    printf("model        %s\n", in->model[0] ? in->model : "-");
    printf("step         %" PRId64 "   epoch %" PRId64 "   batch index %" PRId64 "\n", in->pos.step,
           in->pos.epoch, in->pos.batch_index);
    if (in->has_config_hash)
      printf("config hash  %016" PRIx64 "\n", in->config_hash);
    printf("seed         %" PRIu64 "   rng counter %" PRIu64 "\n", in->pos.seed, in->pos.rng_counter);
    printf("loss scale   %.17g   growth tracker %" PRId64 "\n", in->pos.loss_scale,
           in->pos.loss_scale_growth_tracker);
  }
  printf("parameters   %" PRId64 "%s", in->param_numel, in->is_tessera ? " trainable" : "");
  if (in->is_tessera)
    printf("   buffers %" PRId64 "   optimizer state %" PRId64 " values", in->state_numel,
           in->optim_numel);
  printf("\n\n");
  int w = 4;
  for (int i = 0; i < ts_st_count(f); i++) {
    int l = (int)strlen(ts_st_name(f, i));
    if (l > w) w = l;
  }
  printf("%-*s  %-5s  %-18s  %12s\n", w, "name", "dtype", "shape", "bytes");
  for (int i = 0; i < ts_st_count(f); i++) {
    ts_tensor v;
    if (ts_st_get(f, i, &v)) continue;
    char sh[128];
    ts_shape_str(&v.shape, sh, sizeof sh);
    printf("%-*s  %-5s  %-18s  %12zu\n", w, ts_st_name(f, i), ts_st_dtype_name(v.dtype), sh,
           ts_tensor_nbytes(&v));
  }
  return 0;
}

/* A sliced checkpoint: its manifest, files and every tensor's pieces. */
static int inspect_sliced(const char *dir, int json, int config) {
  ts_ckpt_manifest *m;
  int lrc = ts_ckpt_manifest_load(dir, &m);
  if (lrc) return ts_cli_fail(ts_cli_exit_code(lrc), "%s", ts_last_error());
  ts_ckpt_info in;
  if (ts_ckpt_manifest_info(m, &in)) {
    ts_ckpt_manifest_free(m);
    return ts_cli_fail(1, "%s", ts_last_error());
  }
  int rc = 0;
  if (config) {
    if (!in.config_yaml) rc = ts_cli_fail(1, "%s: the checkpoint holds no config", dir);
    else fputs(in.config_yaml, stdout);
  } else if (json) { /* the manifest as written */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, TS_CKPT_MANIFEST);
    FILE *f = fopen(path, "rb");
    int c;
    while (f && (c = fgetc(f)) != EOF) putchar(c);
    if (f) fclose(f);
  } else {
    char hb[32], sh[128], rb[200];
    human_bytes(in.data_bytes, hb, sizeof hb);
    int nf = ts_ckpt_manifest_num_files(m), nt = ts_ckpt_manifest_num_tensors(m);
    printf("checkpoint   %s (sliced: %d files, %d tensors, %s)\n", dir, nf, nt, hb);
    printf("format       %s, written by tessera %s, id %s\n", in.format, in.version, ts_ckpt_manifest_id(m));
    printf("model        %s\n", in.model[0] ? in.model : "-");
    printf("step         %" PRId64 "   epoch %" PRId64 "   batch index %" PRId64 "\n", in.pos.step, in.pos.epoch,
           in.pos.batch_index);
    if (in.has_config_hash) printf("config hash  %016" PRIx64 "\n", in.config_hash);
    printf("seed         %" PRIu64 "   rng counter %" PRIu64 "\n", in.pos.seed, in.pos.rng_counter);
    printf("loss scale   %.17g   growth tracker %" PRId64 "\n", in.pos.loss_scale, in.pos.loss_scale_growth_tracker);
    printf("layout       %s (%d ranks)\n", ts_ckpt_manifest_layout(m), ts_ckpt_manifest_world_size(m));
    printf("parameters   %" PRId64 " trainable   buffers %" PRId64 "   optimizer state %" PRId64 " values\n\n",
           in.param_numel, in.state_numel, in.optim_numel);
    printf("files\n");
    for (int i = 0; i < nf; i++) {
      const char *name, *sha;
      int rank;
      uint64_t bytes;
      ts_ckpt_manifest_file(m, i, &name, &rank, &bytes, &sha);
      if (rank >= 0) printf("  %-24s rank %-4d %12" PRIu64 " bytes  sha256 %s\n", name, rank, bytes, sha);
      else printf("  %-24s %-9s %12" PRIu64 " bytes  sha256 %s\n", name, "", bytes, sha);
    }
    printf("\ntensors (name, dtype, shape, pieces: file, region of the tensor in its view)\n");
    for (int k = 0; k < nt; k++) {
      const char *name;
      ts_dtype dt;
      ts_shape shape;
      int np;
      ts_ckpt_manifest_tensor(m, k, &name, &dt, &shape, &np);
      printf("  %s  %s  %s  %d piece%s\n", name, ts_st_dtype_name(dt), ts_shape_str(&shape, sh, sizeof sh), np,
             np == 1 ? "" : "s");
      for (int j = 0; j < np; j++) {
        const char *file;
        ts_region r;
        ts_ckpt_manifest_piece(m, k, j, &file, NULL, &r);
        printf("      %-24s %s\n", file, ts_region_str(&r, rb, sizeof rb));
      }
    }
  }
  ts_ckpt_info_free(&in);
  ts_ckpt_manifest_free(m);
  return rc;
}

static int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0, config = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--json"))
      json = 1;
    else if (!strcmp(a, "--config"))
      config = 1;
    else if (a[0] == '-' && a[1])
      return ts_cli_fail(2, "ckpt inspect: unknown option '%s' (see tessera ckpt --help)", a);
    else if (path)
      return ts_cli_fail(2, "ckpt inspect: one checkpoint at a time ('%s' and '%s')", path, a);
    else
      path = a;
  }
  if (!path) return ts_cli_fail(2, "ckpt inspect: which checkpoint? (tessera ckpt inspect FILE)");
  char rpath[4096];
  int e = ts_cli_resolve_ckpt(path, rpath, sizeof rpath);
  if (e) return e;
  path = rpath;
  if (ts_ckpt_is_sliced(path)) return inspect_sliced(path, json, config);
  e = ts_cli_check_input(path, "cannot open the checkpoint");
  if (e) return e;
  ts_st_file *f;
  if (ts_st_open(path, &f)) return ts_cli_fail(1, "%s", ts_last_error());
  ts_ckpt_info in;
  if (ts_ckpt_info_get(f, &in)) {
    ts_st_close(f);
    return ts_cli_fail(1, "%s", ts_last_error());
  }
  int rc;
  if (config) {
    if (!in.config_yaml)
      rc = ts_cli_fail(1, "%s: the checkpoint holds no config", path);
    else {
      fputs(in.config_yaml, stdout);
      rc = 0;
    }
  } else {
    rc = json ? inspect_json(path, f, &in) : inspect_text(path, f, &in);
  }
  ts_ckpt_info_free(&in);
  ts_st_close(f);
  return rc;
}

/* ---- outputs: never an input, never someone else's folder ---- */

/* buf = path made absolute: the realpath of its longest existing part, the rest appended with "."
 * and ".." applied to the text (what creating the missing folders would give). 0, or -1. */
static int abs_path(const char *path, char *buf, size_t cap) {
  char head[PATH_MAX], tail[PATH_MAX] = "", r[PATH_MAX];
  if (!*path || strlen(path) >= sizeof head) return -1;
  if (path[0] == '/') snprintf(head, sizeof head, "%s", path);
  else if (!getcwd(r, sizeof r) || snprintf(head, sizeof head, "%s/%s", r, path) >= (int)sizeof head) return -1;
  for (;;) { /* strip trailing components until what is left exists */
    size_t l = strlen(head);
    while (l > 1 && head[l - 1] == '/') head[--l] = 0;
    if (realpath(head, r)) break;
    char *sl = strrchr(head, '/');
    if (!sl) return -1;
    char t[PATH_MAX];
    if (snprintf(t, sizeof t, "%s%s%s", sl + 1, tail[0] ? "/" : "", tail) >= (int)sizeof t) return -1;
    memcpy(tail, t, sizeof tail);
    if (sl == head) {
      snprintf(r, sizeof r, "/");
      break;
    }
    *sl = 0;
  }
  snprintf(buf, cap, "%s", r);
  for (char *save = NULL, *c = strtok_r(tail, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    size_t l = strlen(buf);
    if (!strcmp(c, ".")) continue;
    if (!strcmp(c, "..")) {
      char *sl = strrchr(buf, '/');
      if (sl == buf) buf[1] = 0;
      else if (sl) *sl = 0;
      continue;
    }
    if (l + 1 + strlen(c) >= cap) return -1;
    snprintf(buf + l, cap - l, "%s%s", l == 1 ? "" : "/", c);
  }
  return 0;
}

/* 1 when inner is outer or lies inside it (absolute, normalised paths). */
static int path_within(const char *inner, const char *outer) {
  size_t l = strlen(outer);
  if (!strcmp(outer, "/")) return 1;
  return !strncmp(inner, outer, l) && (inner[l] == 0 || inner[l] == '/');
}

/* A folder holding a checkpoint Tessera wrote: a manifest and nothing but checkpoint files
 * (foreign: the first other name, "" when none; *empty: the folder holds nothing). */
static int tessera_dir(const char *dir, char *foreign, size_t cap, int *empty) {
  char p[PATH_MAX + 32];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", dir, TS_CKPT_MANIFEST);
  int manifest = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
  foreign[0] = 0;
  *empty = 1;
  DIR *d = opendir(dir);
  if (!d) return *empty = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    *empty = 0;
    if (ts__ckpt_dir_own(e->d_name)) continue;
    snprintf(foreign, cap, "%s", e->d_name);
    break;
  }
  closedir(d);
  return manifest && !foreign[0];
}

/* A whole safetensors file with tessera metadata (a checkpoint, a merge or an export). */
static int tessera_file(const char *path) {
  ts_st_file *f;
  if (ts_st_open(path, &f)) return 0;
  int yes = 0;
  for (int i = 0; i < ts_st_meta_count(f) && !yes; i++) yes = !strncmp(ts_st_meta_key(f, i), "tessera.", 8);
  ts_st_close(f);
  return yes;
}

/* Before anything is written: out (a file, or a folder when dir) is not the input checkpoint in,
 * does not lie inside it nor contain it (compared as real paths), and is either new, an empty
 * folder (dir), or a checkpoint Tessera wrote that the user asked to replace (--overwrite).
 * 0, or ts_cli_fail(2, one line naming both). */
static int check_output(const char *cmd, const char *in, const char *out, int dir, int overwrite) {
  char ai[PATH_MAX], ao[PATH_MAX];
  if (abs_path(in, ai, sizeof ai) || abs_path(out, ao, sizeof ao))
    return ts_cli_fail(2, "ckpt %s: cannot resolve the paths %s and %s", cmd, in, out);
  if (!strcmp(ai, ao))
    return ts_cli_fail(2, "ckpt %s: the output %s is the checkpoint %s it reads: nothing written (choose another -o)",
                       cmd, out, in);
  if (path_within(ao, ai))
    return ts_cli_fail(2, "ckpt %s: the output %s lies inside the checkpoint %s it reads: nothing written (choose a "
                       "path outside it)", cmd, out, in);
  if (path_within(ai, ao))
    return ts_cli_fail(2, "ckpt %s: the output %s contains the checkpoint %s it reads: nothing written (choose a "
                       "path outside it)", cmd, out, in);
  struct stat sb;
  if (stat(out, &sb) != 0) {
    if (errno == ENOENT) return 0;
    return ts_cli_fail(2, "ckpt %s: %s: %s", cmd, out, strerror(errno));
  }
  if (dir) {
    char foreign[256];
    int empty;
    if (!S_ISDIR(sb.st_mode))
      return ts_cli_fail(2, "ckpt %s: the output %s exists and is not a folder: nothing written (choose another -o)",
                         cmd, out);
    if (tessera_dir(out, foreign, sizeof foreign, &empty)) {
      if (overwrite) return 0;
      return ts_cli_fail(2, "ckpt %s: the output %s already holds a checkpoint: nothing written (--overwrite "
                         "replaces it)", cmd, out);
    }
    if (empty) return 0; /* an empty folder (made for the output): nothing in it to lose */
    return ts_cli_fail(2, "ckpt %s: the output %s is a folder that is not a checkpoint Tessera wrote%s%s%s: left as "
                       "it is, nothing written (choose another -o)", cmd, out, foreign[0] ? " (it holds '" : "",
                       foreign, foreign[0] ? "')" : "");
  }
  if (S_ISDIR(sb.st_mode))
    return ts_cli_fail(2, "ckpt %s: the output %s is a folder: nothing written (-o names the file to write)", cmd,
                       out);
  if (!tessera_file(out))
    return ts_cli_fail(2, "ckpt %s: the output %s exists and is not a checkpoint Tessera wrote: left as it is, "
                       "nothing written (choose another -o)", cmd, out);
  if (overwrite) return 0;
  return ts_cli_fail(2, "ckpt %s: the output %s already exists: nothing written (--overwrite replaces it)", cmd, out);
}

/* The arguments of a command that reads one checkpoint and writes one output (IN -o OUT
 * [--overwrite]): -1 to go on, else the exit status (0 after --help). */
static int in_out_args(const char *cmd, int argc, char **argv, const char **in, const char **out, int *overwrite) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (i + 1 >= argc) return ts_cli_fail(2, "ckpt %s: option %s needs a value", cmd, a);
      *out = argv[++i];
    } else if (!strcmp(a, "--overwrite") || !strcmp(a, "--force")) {
      *overwrite = 1;
    } else if (a[0] == '-' && a[1]) {
      return ts_cli_fail(2, "ckpt %s: unknown option '%s' (see tessera ckpt --help)", cmd, a);
    } else if (*in) {
      return ts_cli_fail(2, "ckpt %s: one checkpoint at a time ('%s' and '%s')", cmd, *in, a);
    } else {
      *in = a;
    }
  }
  return -1;
}

static int cmd_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  int overwrite = 0, e = in_out_args("export", argc, argv, &in, &out, &overwrite);
  if (e >= 0) return e;
  if (!in || !out)
    return ts_cli_fail(2, "ckpt export: usage: tessera ckpt export FILE|DIR -o OUT");
  char rin[4096];
  e = ts_cli_resolve_ckpt(in, rin, sizeof rin);
  if (e) return e;
  in = rin;
  if (!ts_ckpt_is_sliced(in) && (e = ts_cli_check_input(in, "cannot open the checkpoint"))) return e;
  if ((e = check_output("export", in, out, 0, overwrite))) return e;
  /* a sliced checkpoint (TP, pipeline, sharded optimizer): its tensors merged as they are read */
  if ((e = ts_ckpt_export_params(in, out))) return ts_cli_fail(ts_cli_exit_code(e), "%s", ts_last_error());
  ts_ckpt_info info;
  if (ts_ckpt_read_info(out, &info) == TS_OK) {
    printf("wrote %s: %d tensors, %" PRId64 " values\n", out, info.ntensors, info.param_numel);
    ts_ckpt_info_free(&info);
  }
  return 0;
}

static int cmd_verify(int argc, char **argv) {
  const char *path = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (a[0] == '-' && a[1]) return ts_cli_fail(2, "ckpt verify: unknown option '%s' (see tessera ckpt --help)", a);
    if (path) return ts_cli_fail(2, "ckpt verify: one checkpoint at a time ('%s' and '%s')", path, a);
    path = a;
  }
  if (!path) return ts_cli_fail(2, "ckpt verify: which checkpoint? (tessera ckpt verify FILE|DIR)");
  char rpath[4096];
  int e = ts_cli_resolve_ckpt(path, rpath, sizeof rpath);
  if (e) return e;
  path = rpath;
  if (!ts_ckpt_is_sliced(path) && (e = ts_cli_check_input(path, "cannot open the checkpoint"))) return e;
  char sum[1200];
  if (ts_ckpt_verify(path, sum, sizeof sum)) return ts_cli_fail(1, "verify: %s", ts_last_error());
  printf("ok: %s\n", sum);
  return 0;
}

/* The config text the same run writes with checkpoint.format whole: the manifest's with that key
 * changed (NULL when the manifest has none or it does not parse: the manifest's is kept). */
static char *whole_config(const char *dir) {
  ts_ckpt_manifest *m;
  if (ts_ckpt_manifest_load(dir, &m)) return NULL;
  ts_ckpt_info in;
  char *out = NULL;
  if (!ts_ckpt_manifest_info(m, &in) && in.config_yaml) {
    TS_CLI_CONFIG(c);
    const char *set[] = {"checkpoint.format=whole"};
    if (!ts_config_load_string(in.config_yaml, "the checkpoint's config", set, 1, &c)) ts_config_dump_string(&c, &out);
  }
  ts_ckpt_info_free(&in);
  ts_ckpt_manifest_free(m);
  return out;
}

static int cmd_merge(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  int overwrite = 0, e = in_out_args("merge", argc, argv, &in, &out, &overwrite);
  if (e >= 0) return e;
  if (!in || !out) return ts_cli_fail(2, "ckpt merge: usage: tessera ckpt merge DIR -o OUT.safetensors");
  char rin[4096];
  e = ts_cli_resolve_ckpt(in, rin, sizeof rin);
  if (!e) e = ts_cli_check_exists(rin, "cannot open the checkpoint");
  if (e) return e;
  in = rin;
  if (!ts_ckpt_is_sliced(in))
    return ts_cli_fail(2, "ckpt merge: %s is not a sliced checkpoint (a directory with a %s)", in, TS_CKPT_MANIFEST);
  if ((e = check_output("merge", in, out, 0, overwrite))) return e;
  char *yaml = whole_config(in);
  int rc = ts_ckpt_merge(in, out, yaml);
  free(yaml);
  if (rc) return ts_cli_fail(1, "merge: %s", ts_last_error());
  ts_ckpt_info info;
  if (ts_ckpt_read_info(out, &info) == TS_OK) {
    printf("wrote %s: %d tensors, step %" PRId64 "\n", out, info.ntensors, info.pos.step);
    ts_ckpt_info_free(&info);
  }
  return 0;
}

#define MAX_SETS 64

static int cmd_reshard(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *cfgfile = NULL, *sets[MAX_SETS + 2];
  int n = 0, ns = 0, overwrite = 0;
  char strat[4200];
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    int val = !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "-n") || !strcmp(a, "--set") ||
              !strcmp(a, "--strategy") || !strcmp(a, "--config");
    if (val && i + 1 >= argc) return ts_cli_fail(2, "ckpt reshard: option %s needs a value", a);
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      out = argv[++i];
    } else if (!strcmp(a, "--overwrite") || !strcmp(a, "--force")) {
      overwrite = 1;
    } else if (!strcmp(a, "-n")) {
      char *e;
      long v = strtol(argv[++i], &e, 10);
      if (*e || v < 1 || v > 1000000) return ts_cli_fail(2, "ckpt reshard: -n needs a number of ranks, got '%s'", argv[i]);
      n = (int)v;
    } else if (!strcmp(a, "--set")) {
      if (ns >= MAX_SETS) return ts_cli_fail(2, "ckpt reshard: at most %d --set", MAX_SETS);
      sets[ns++] = argv[++i];
    } else if (!strcmp(a, "--config")) {
      cfgfile = argv[++i];
    } else if (!strcmp(a, "--strategy")) {
      snprintf(strat, sizeof strat, "parallel.strategy_ckpt_load_file=%s", argv[++i]);
      if (ns >= MAX_SETS) return ts_cli_fail(2, "ckpt reshard: at most %d --set", MAX_SETS);
      sets[ns++] = strat;
    } else if (a[0] == '-' && a[1]) {
      return ts_cli_fail(2, "ckpt reshard: unknown option '%s' (see tessera ckpt --help)", a);
    } else if (in) {
      return ts_cli_fail(2, "ckpt reshard: one checkpoint at a time ('%s' and '%s')", in, a);
    } else {
      in = a;
    }
  }
  if (!in || !out || !n) return ts_cli_fail(2, "ckpt reshard: usage: tessera ckpt reshard DIR -n N [--set k=v ...] -o DIR2");
  char rin[4096];
  int e = ts_cli_resolve_ckpt(in, rin, sizeof rin);
  if (!e) e = ts_cli_check_exists(rin, "cannot open the checkpoint");
  if (!e && cfgfile) e = ts_cli_check_exists(cfgfile, "cannot read the config");
  if (!e) e = check_output("reshard", rin, out, 1, overwrite);
  if (e) return e;
  in = rin;
  ts_ckpt_manifest *m;
  if ((e = ts_ckpt_manifest_load(in, &m))) return ts_cli_fail(ts_cli_exit_code(e), "reshard: %s", ts_last_error());
  ts_ckpt_info info;
  int rc = ts_ckpt_manifest_info(m, &info);
  ts_ckpt_manifest_free(m);
  if (rc) return ts_cli_fail(1, "reshard: %s", ts_last_error());
  if (!info.config_yaml && !cfgfile) {
    ts_ckpt_info_free(&info);
    return ts_cli_fail(2, "reshard: %s holds no config to build the new layout from (give one with --config)", in);
  }
  TS_CLI_CONFIG(cfg); /* the new layout: the checkpoint's config, or the one given, with the --set changes */
  rc = cfgfile ? ts_config_load(cfgfile, sets, ns, &cfg)
               : ts_config_load_string(info.config_yaml, "the checkpoint's config", sets, ns, &cfg);
  ts_ckpt_info_free(&info);
  if (rc) return ts_cli_fail(2, "reshard: %s", ts_last_error());
  if (cfg.parallel.mode == TS_PARALLEL_HYBRID)
    return ts_cli_fail(2, "reshard: parallel.mode hybrid_parallel: the model is written with the C API; load the "
                       "checkpoint from the program instead");
  rc = ts_trainer_reshard(&cfg, n, in, out);
  if (rc) return ts_cli_fail(rc == TS_ECONFIG ? 2 : 1, "%s", ts_last_error());
  printf("wrote %s: the checkpoint re-cut for %d rank%s\n", out, n, n == 1 ? "" : "s");
  return 0;
}

int ts_cli_ckpt(int argc, char **argv) {
  if (argc < 1) return usage(stderr);
  const char *sub = argv[0];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) return usage(stdout);
  if (!strcmp(sub, "inspect")) return cmd_inspect(argc - 1, argv + 1);
  if (!strcmp(sub, "export")) return cmd_export(argc - 1, argv + 1);
  if (!strcmp(sub, "verify")) return cmd_verify(argc - 1, argv + 1);
  if (!strcmp(sub, "merge")) return cmd_merge(argc - 1, argv + 1);
  if (!strcmp(sub, "reshard")) return cmd_reshard(argc - 1, argv + 1);
  return ts_cli_fail(2, "ckpt: unknown subcommand '%s' (inspect, export, verify, merge, reshard; see tessera ckpt "
                     "--help)", sub);
}
