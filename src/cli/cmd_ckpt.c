/* `tessera ckpt`: inspect a checkpoint (training position, model, config hash, tensor table) or
 * export its parameters as a plain safetensors state_dict. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera/checkpoint.h"
#include "tessera/tessera.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: tessera ckpt inspect FILE [--json] [--config]\n"
          "       tessera ckpt export FILE -o OUT\n"
          "inspect  prints the step, epoch, model, config hash and the table of tensors\n"
          "         (--json: the same as one JSON object; --config: the stored YAML config)\n"
          "export   writes the parameters and buffers only, under their PyTorch names, to OUT\n"
          "example: tessera ckpt inspect checkpoints/resnet20_fashion/ckpt-00007035.safetensors\n"
          "         tessera ckpt export checkpoints/mlp_fashion/ckpt-00002340.safetensors -o "
          "mlp.safetensors\n");
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
  cJSON_AddStringToObject(o, "version", in->version);
  cJSON_AddStringToObject(o, "model", in->model);
  cJSON_AddItemToObject(o, "step", raw_num("%" PRId64, in->step));
  cJSON_AddItemToObject(o, "epoch", raw_num("%" PRId64, in->epoch));
  cJSON_AddItemToObject(o, "batch_index", raw_num("%" PRId64, in->batch_index));
  if (in->has_config_hash) {
    char h[32];
    snprintf(h, sizeof h, "%016" PRIx64, in->config_hash);
    cJSON_AddStringToObject(o, "config_hash", h);
  } else {
    cJSON_AddNullToObject(o, "config_hash");
  }
  cJSON_AddItemToObject(o, "seed", raw_num("%" PRIu64, in->seed));
  cJSON_AddItemToObject(o, "rng_counter", raw_num("%" PRIu64, in->rng_counter));
  cJSON_AddNumberToObject(o, "loss_scale", in->loss_scale);
  cJSON_AddItemToObject(o, "loss_scale_growth_tracker",
                        raw_num("%" PRId64, in->loss_scale_growth_tracker));
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
    printf("format       plain safetensors (no tessera metadata: parameters only)\n");
  } else {
    printf("format       %s%s%s\n", in->format, in->version[0] ? ", written by tessera " : "",
           in->version);
    printf("model        %s\n", in->model[0] ? in->model : "-");
    printf("step         %" PRId64 "   epoch %" PRId64 "   batch index %" PRId64 "\n", in->step,
           in->epoch, in->batch_index);
    if (in->has_config_hash)
      printf("config hash  %016" PRIx64 "\n", in->config_hash);
    printf("seed         %" PRIu64 "   rng counter %" PRIu64 "\n", in->seed, in->rng_counter);
    printf("loss scale   %.17g   growth tracker %" PRId64 "\n", in->loss_scale,
           in->loss_scale_growth_tracker);
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
  int e = ts_cli_check_input(path, "cannot open the checkpoint");
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

static int cmd_export(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (i + 1 >= argc) return ts_cli_fail(2, "ckpt export: option %s needs a value", a);
      out = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      return ts_cli_fail(2, "ckpt export: unknown option '%s' (see tessera ckpt --help)", a);
    } else if (in) {
      return ts_cli_fail(2, "ckpt export: one checkpoint at a time ('%s' and '%s')", in, a);
    } else {
      in = a;
    }
  }
  if (!in || !out)
    return ts_cli_fail(2, "ckpt export: usage: tessera ckpt export FILE -o OUT");
  int e = ts_cli_check_input(in, "cannot open the checkpoint");
  if (e) return e;
  if (ts_ckpt_export_params(in, out)) return ts_cli_fail(1, "%s", ts_last_error());
  ts_ckpt_info info;
  if (ts_ckpt_read_info(out, &info) == TS_OK) {
    printf("wrote %s: %d tensors, %" PRId64 " values\n", out, info.ntensors, info.param_numel);
    ts_ckpt_info_free(&info);
  }
  return 0;
}

int ts_cli_ckpt(int argc, char **argv) {
  if (argc < 1) return usage(stderr);
  const char *sub = argv[0];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) return usage(stdout);
  if (!strcmp(sub, "inspect")) return cmd_inspect(argc - 1, argv + 1);
  if (!strcmp(sub, "export")) return cmd_export(argc - 1, argv + 1);
  return ts_cli_fail(2, "ckpt: unknown subcommand '%s' (inspect, export; see tessera ckpt --help)",
                     sub);
}
