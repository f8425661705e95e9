/* `tessera plan`: the job's distribution object built for one rank of a job that need not exist
 * (the same build path as training, without MPI), and the figures a user sizes a job by
 * (include/tessera/train.h, ts_trainer_plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "planner/planner.h"
#include "../base/text.h"
#include "distribution/compat.h"
#include "train_impl.h"

/* The figures of one built layout: parameters and the planned activation arena of the step. */
static void figures(ts_dist *d, double *param_bytes, double *arena) {
  const ts_dist_run *r = ts_dist_get(d);
  /* the trainable parameters the rank holds (ZeRO-3: its part and the gather slots) */
  ts_dist_memory_info m;
  *param_bytes = (double)ts_params_numel(r->params) * 4;
  if (!ts_dist_memory(d, 0, &m) && ts_dist_optim_sharded(d, NULL, NULL))
    *param_bytes = (double)m.param_bytes - 4.0 * (double)ts_params_state_numel(r->params);
  *arena = (double)ts_plan_peak_bytes(r->plan);
}


/* The rank's figures as the run measures them (ts_trainer_memory: the header's memory line and
 * the metrics end record), and the budget: TS_ECONFIG when they exceed train.max_memory_mb. */
static int plan_memory(const ts_config *c, ts_dist *d, int rank, int ndevices, int64_t baseline, FILE *b,
                       int *refused) {
  ts_dist_memory_info m;
  int rc = ts_dist_memory(d, ts_optim_kind_num_slots(c->optimizer.name), &m);
  if (rc) return rc;
  char h1[32], h2[32], h3[32];
  fprintf(b, "rank %d's figures, as the run measures them (its memory/rank line, the metrics end record):\n", rank);
  fprintf(b, "  param_bytes            %12s\n", ts__human_bytes((double)m.param_bytes, h1, sizeof h1));
  fprintf(b, "  grad_bytes             %12s  (accumulation buffer %s)\n", ts__human_bytes((double)m.grad_bytes, h1, sizeof h1),
          ts__human_bytes((double)m.accum_bytes, h2, sizeof h2));
  fprintf(b, "  optimizer_state_bytes  %12s\n", ts__human_bytes((double)m.optimizer_state_bytes, h1, sizeof h1));
  fprintf(b, "  activation_peak_bytes  %12s  (+ evaluation arena %s)\n", ts__human_bytes((double)m.activation_bytes, h1, sizeof h1),
          ts__human_bytes((double)m.eval_activation_bytes, h2, sizeof h2));
  fprintf(b, "  total                  %12s\n", ts__human_bytes((double)m.total_bytes, h1, sizeof h1));
  fprintf(b, "  peak_rss_bytes       ~ %12s  (the total + a baseline of %s: this process's resident set with the "
          "data sets open, before the model is built; MPI, data workers' batches and kernel scratch come on top)\n",
          ts__human_bytes((double)(m.total_bytes + baseline), h1, sizeof h1), ts__human_bytes((double)baseline, h3, sizeof h3));
  if (!(c->train.max_memory_mb > 0)) return TS_OK;
  *refused = ts__train_memory_budget(c, &m, ndevices, 0);
  fprintf(b, "  train.max_memory_mb    %12s  %s\n", ts__human_bytes(c->train.max_memory_mb * 1048576.0, h1, sizeof h1),
          *refused ? "does NOT fit: the run would refuse to start" : "fits");
  return TS_OK;
}

/* One rank of the job built dry: its trainer-side pieces (config, sources, the model), the
 * strategies and the distribution object; and one process's, for comparison (d1, when asked). */
typedef struct {
  ts_trainer *t;
  ts_strategy_set *set; /* the user's strategies, parsed (NULL: none, or a plan's) */
  ts_autoplan plan;     /* auto_parallel: the searched plan (its strategies are the build's) */
  ts_dist *d, *d1;
  const ts_dist_vt *vt;
  ts_dist_config dc;
  int64_t baseline; /* resident bytes once the data sets are open, before the model is built */
} dry;

static void dry_free(dry *x) {
  ts_dist_free(x->d);
  ts_dist_free(x->d1);
  ts_strategy_set_free(x->set);
  ts_autoplan_free(&x->plan);
  if (x->t) {
    ts_source_free(x->t->train_src);
    ts_source_free(x->t->test_src);
    ts_config_free(&x->t->cfg);
  }
  free(x->t);
}

/* The training sample the graphs are built for, without opening a data set where the config says
 * it (planning a job on paper needs no data files): GPT's is data.seq_len token ids (its targets
 * the next ones); MNIST / Fashion-MNIST (28x28x1 bytes) and CIFAR (32x32x3) images are a zero
 * sample of that shape passed through the training transforms, exactly what the run's probe of
 * the first sample gives. *done = 0 for other data sets (the caller opens them). */
int ts__train_dry_sample(ts_trainer *t, int *done) {
  ts_config *c = &t->cfg;
  *done = 0;
  if (c->model.name == TS_MODEL_GPT && !t->model.custom) { /* a callback's model: its data set's sample */
    if (c->data.seq_len < 1) return ts_error_set(TS_ECONFIG, "data.seq_len: GPT needs a sequence length, got %d", c->data.seq_len);
    t->model.sample = ts_shape1(c->data.seq_len);
    t->model.dtype = TS_I32;
    t->model.text = 1;
    *done = 1;
    return TS_OK;
  }
  ts_shape raw;
  switch (c->data.name) {
    case TS_DATA_FASHION_MNIST:
    case TS_DATA_MNIST: raw = ts_shape3(28, 28, 1); break;
    case TS_DATA_CIFAR10:
    case TS_DATA_CIFAR100: raw = ts_shape3(32, 32, 3); break;
    default: return TS_OK;
  }
  if (c->model.num_classes == 0 && !t->model.custom) return TS_OK; /* the zoo model needs the data set's count */
  int rc = ts_config_transforms(c, 1, t->tf_train, TS_CFG_MAX_TRANSFORMS);
  if (rc < 0) return rc;
  t->ntf_train = rc;
  ts_sample s;
  memset(&s, 0, sizeof s);
  s.label = 0;
  rc = ts_tensor_init(&s.data, TS_U8, raw);
  if (!rc) memset(s.data.data, 0, (size_t)ts_shape_numel(&raw));
  if (!rc) rc = ts_transforms_apply(t->tf_train, t->ntf_train, &s, 0);
  if (!rc) {
    t->model.sample = s.data.shape;
    t->model.dtype = s.data.dtype;
    t->model.text = 0;
    *done = 1;
  }
  ts_sample_free(&s);
  return rc ? ts_error_wrap(rc, "data.transforms (planning on a zero %s sample)", ts_data_kind_name(c->data.name)) : TS_OK;
}

/* The job's layout for one rank without building it: the config copied and validated, the plan
 * (given: applied to it; auto_parallel: searched), the layout and its distribution config (the
 * plan on it as a value), the sample, and the strategies (the plan's set, or the user's parsed)
 * in x->t->model.strategies. */
static int dry_setup(const ts_config *cfg, const ts_autoplan *given, int ndevices, int rank, ts_model_fn model,
                     void *user, dry *x) {
  memset(x, 0, sizeof *x);
  if (ndevices < 1 || rank < 0 || rank >= ndevices)
    return ts_error_set(TS_EINVAL, "plan: rank %d of %d devices", rank, ndevices);
  ts_trainer *t = x->t = calloc(1, sizeof *t);
  if (!t) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  int rc = ts_config_copy(&t->cfg, cfg); /* its own: a plan replaces the layout keys */
  if (!rc) rc = ts_config_validate(&t->cfg);
  if (!rc && given) {
    if (!(rc = ts_autoplan_copy(&x->plan, given))) rc = ts_config_apply_autoplan(&t->cfg, &x->plan);
    if (!rc) rc = ts_config_validate(&t->cfg);
  } else if (!rc && t->cfg.parallel.mode == TS_PARALLEL_AUTO) {
    rc = ts__train_auto(&t->cfg, ndevices, model, user, &x->plan);
    given = &x->plan;
  }
  if (!rc) rc = ts__train_layout(&t->cfg, model, user, &x->vt, &x->dc, &t->model);
  if (!rc && given) ts__autoplan_dist(&x->plan, t->cfg.train.batch_size, &x->dc, &x->vt, NULL);
  int have = 0;
  if (!rc) rc = ts__train_dry_sample(t, &have); /* no data set opened where the config tells the sample */
  if (!rc && !have) rc = ts__train_prepare(t);
  x->baseline = ts_mem_rss(); /* libraries, config, the data sets as the run holds them */
  if (!rc && !given) rc = ts__train_strategies(&t->cfg, ndevices, &x->set);
  t->model.strategies = given ? x->plan.strategies : x->set;
  return rc;
}

/* allocate = 1: the store and the arenas allocated as the job would (ts_dist_config.dry_allocate). */
static int dry_build_as(const ts_config *cfg, const ts_autoplan *given, int ndevices, int rank, ts_model_fn model,
                        void *user, int one, int allocate, dry *x) {
  int rc = dry_setup(cfg, given, ndevices, rank, model, user, x);
  if (rc) return rc;
  ts_trainer *t = x->t;
  ts_dist_config dc = x->dc;
  dc.dry_allocate = allocate;
  if (!rc) rc = ts_dist_create(x->vt, &dc, &t->model, ndevices, rank, &x->d);
  if (!rc && (rc = ts_dist_build(x->d, &t->model))) rc = ts_error_as_config(rc);
  ts_dist_config dc1 = dc;
  ts__dist_config_set_layout(&dc1, ts__dist_config_stages(&dc1), 0); /* one process: nothing to shard over */
  if (!rc && one) rc = ts_dist_create(ts_dist_find("stand_alone"), &dc1, &t->model, 1, 0, &x->d1);
  if (!rc && one) rc = ts_dist_build(x->d1, &t->model);
  t->model.strategies = NULL;
  return rc;
}

/* One rank of the job as `tessera plan` builds it: sized, nothing allocated. */
static int dry_build(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user, int one, dry *x) {
  return dry_build_as(cfg, NULL, ndevices, rank, model, user, one, 0, x);
}

int ts__train_dry_pieces(const ts_config *cfg, int ndevices, int rank, int nslots, const char *const *slot_names,
                         ts_piece_list *pieces, ts_piece_list *tensors) {
  dry x;
  int rc = dry_build(cfg, ndevices, rank, NULL, NULL, 0, &x);
  if (!rc) rc = ts_dist_pieces(x.d, nslots, slot_names, NULL, pieces);
  if (!rc && tensors) rc = ts_dist_tensors(x.d, 1, nslots, slot_names, tensors);
  dry_free(&x);
  return rc;
}

int ts__trainer_plan_memory(const ts_config *cfg, int ndevices, int rank, int allocate, ts_dist_memory_info *out,
                            int *sized) {
  memset(out, 0, sizeof *out);
  dry x;
  int rc = dry_build_as(cfg, NULL, ndevices, rank, NULL, NULL, 0, allocate, &x);
  if (!rc) rc = ts_dist_memory(x.d, ts_optim_kind_num_slots(x.t->cfg.optimizer.name), out);
  if (!rc && sized) {
    const ts_dist_run *r = ts_dist_get(x.d);
    *sized = ts_params_is_dry(r->params) && !ts_params_data(r->params) && !ts_params_grads(r->params) &&
             ts_plan_is_dry(r->plan) && ts_plan_is_dry(r->plan_e) && ts_plan_arena_bytes(r->plan) == 0;
  }
  dry_free(&x);
  return rc;
}

int ts_trainer_plan_memory(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                           ts_dist_memory_info *out) {
  memset(out, 0, sizeof *out);
  dry x;
  int rc = dry_build(cfg, ndevices, rank, model, user, 0, &x);
  if (!rc) rc = ts_dist_memory(x.d, ts_optim_kind_num_slots(x.t->cfg.optimizer.name), out);
  dry_free(&x);
  return rc;
}

int ts_trainer_plan(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                    char **text) {
  return ts_trainer_plan_report(cfg, ndevices, rank, model, user, text, NULL, NULL);
}

static int plan_report(const ts_config *cfg, const ts_autoplan *given, int ndevices, int rank, ts_model_fn model,
                       void *user, char **text, ts_dist_memory_info *mem, int64_t *baseline);

int ts_trainer_plan_report(const ts_config *cfg, int ndevices, int rank, ts_model_fn model, void *user,
                           char **text, ts_dist_memory_info *mem, int64_t *baseline) {
  return plan_report(cfg, NULL, ndevices, rank, model, user, text, mem, baseline);
}

int ts_trainer_plan_report_autoplan(const ts_config *cfg, const ts_autoplan *plan, int ndevices, int rank, char **text,
                                    ts_dist_memory_info *mem, int64_t *baseline) {
  return plan_report(cfg, plan, ndevices, rank, NULL, NULL, text, mem, baseline);
}

/* device_target GPU: which GPU each rank drives and what carries the collectives on device
 * buffers, as the job would choose them (dist_device.c, runtime/dcoll.c); a layout that does not
 * run on GPUs yet says why */
static void plan_gpus(FILE *b, const ts_config *cfg, const ts_dist_vt *vt, const ts_dist_config *dc, int n) {
  if (ts__dist_dev_check(ts_dist_name(vt), dc)) {
    fprintf(b, "devices: GPUs: %s\n\n", ts_last_error());
    return;
  }
  ts_cluster c;
  int per = 0; /* the GPUs of parallel.cluster's nodes ("local", this machine's cores, says nothing of them) */
  if (cfg->parallel.cluster[0] && strcmp(cfg->parallel.cluster, "local") && !ts_cluster_load(cfg->parallel.cluster, &c))
    per = c.devices_per_node;
  int shared = n > 1 && cfg->device_id >= 0;
  if (cfg->device_id >= 0) fprintf(b, "devices: %sGPU %d (device_id)", n > 1 ? "every rank on " : "", cfg->device_id);
  else if (n < 2) fprintf(b, "devices: GPU 0 (DEVICE_ID, where set, instead)");
  else if (per > 0)
    fprintf(b, "devices: rank r on GPU r mod %d of node r / %d (%s: %d GPUs a node; DEVICE_ID, where set, instead)", per,
            per, c.name, per);
  else fprintf(b, "devices: each rank on its local rank's GPU modulo the host's GPUs (DEVICE_ID, where set, instead)");
  if (n < 2) fprintf(b, "\n\n");
  else if (cfg->parallel.comm_backend == 2 || shared)
    fprintf(b, "; collectives: MPI staged through pinned host memory (%s)\n\n",
            shared ? "ranks share a GPU" : "parallel.comm_backend mpi");
  else if (!strcmp(ts_dist_name(vt), "pipeline") || dc->pipeline_stages > 1)
    fprintf(b, "; collectives: NCCL where every rank has a GPU of its own and it loads (else MPI staged through pinned "
            "host memory), the gradients all-reduced over a stage's replicas; the activations between stages staged "
            "through host memory (MPI send/recv)\n\n");
  else
    fprintf(b, "; collectives: NCCL where every rank has a GPU of its own and it loads (else MPI staged through pinned "
            "host memory)%s\n\n", !strcmp(ts_dist_name(vt), "data_parallel") && dc->accum == 1 && dc->overlap
                                      ? ", the gradients' buckets overlapped with backward"
                                      : ", the gradients all-reduced over their holders (in buckets overlapped with "
                                        "backward where one group holds them all)");
}

static int plan_report(const ts_config *cfg, const ts_autoplan *given, int ndevices, int rank, ts_model_fn model,
                       void *user, char **text, ts_dist_memory_info *mem, int64_t *baseline) {
  *text = NULL;
  if (mem) memset(mem, 0, sizeof *mem);
  if (baseline) *baseline = 0;
  char *mp = NULL;
  size_t mn = 0;
  FILE *b = open_memstream(&mp, &mn); /* the report */
  if (!b) return ts_error_set(TS_ENOMEM, "plan: out of memory");
  dry x;
  int refused = TS_OK; /* over train.max_memory_mb: the report is still given */
  char why[1024] = "";
  int rc = dry_build_as(cfg, given, ndevices, rank, model, user, 1, 0, &x);
  ts_dist *d = x.d, *d1 = x.d1;
  if (!rc && baseline) *baseline = x.baseline > 0 ? x.baseline : 0;
  if (!rc && mem) rc = ts_dist_memory(d, ts_optim_kind_num_slots(x.t->cfg.optimizer.name), mem);
  if (!rc) {
    const ts_dist_run *r = ts_dist_get(d);
    char h1[32], h2[32], h3[32];
    char piece[96] = "every rank reads the whole batch";
    if (r->data_parts > 1)
      snprintf(piece, sizeof piece, "the batch cut in %d pieces; this rank reads piece %d", r->data_parts,
               r->data_index);
    int64_t mb = r->micro_batch * r->data_parts; /* global rows of one micro-step */
    fprintf(b, "plan: %s on %s, %s on %d devices, rank %d shown; micro-batch %lld (%s)\n\n",
            model ? "custom model" : ts_model_kind_name(cfg->model.name), ts_data_kind_name(cfg->data.name),
            ts_dist_name(x.vt), ndevices, rank, (long long)mb, piece);
    if (cfg->device_target == TS_CFG_DEVICE_GPU) plan_gpus(b, cfg, x.vt, &x.dc, ndevices);
    double red = 0;
    rc = ts_dist_describe(d, b, &red);
    if (!rc) {
      int64_t accum = cfg->train.batch_size / (mb > 0 ? mb : 1), fwd, bwd;
      ts_dist_comm_bytes(d, &fwd, &bwd);
      double pb, pb1, arena, arena1;
      figures(d, &pb, &arena);
      figures(d1, &pb1, &arena1);
      int slots = ts_optim_kind_num_slots(cfg->optimizer.name);
      size_t rep, sh;
      double ob = pb * slots; /* optimizer state: of the rank's parameters, or of its shard */
      ts_dist_memory_info om;
      double gb = pb; /* gradients: the store's buffer, or under optimizer-state sharding what ts_dist_memory counts */
      if (ts_dist_optim_sharded(d, &rep, &sh) && !ts_dist_memory(d, slots, &om)) {
        ob = (double)om.optimizer_state_bytes; /* the rank's optimizer: its groups' parts + replicated */
        gb = (double)(om.grad_bytes - om.accum_bytes); /* stages 2, 3: staging slots + reduced parts */
      }
      fprintf(b, "\nmemory per rank (rank %d) vs one process:\n", rank);
      fprintf(b, "  parameters           %12s  of %12s  (%.3f)\n", ts__human_bytes(pb, h1, sizeof h1), ts__human_bytes(pb1, h2, sizeof h2), pb / pb1);
      fprintf(b, "  gradients            %12s  of %12s  (%.3f)\n", ts__human_bytes(gb, h1, sizeof h1),
              ts__human_bytes(pb1, h2, sizeof h2), gb / pb1);
      fprintf(b, "  optimizer state      %12s  of %12s  (%s: %d slot%s%s)\n", ts__human_bytes(ob, h1, sizeof h1),
              ts__human_bytes(pb1 * slots, h2, sizeof h2), ts_optim_kind_name(cfg->optimizer.name), slots, slots == 1 ? "" : "s",
              ob < pb * slots ? ", sharded" : "");
      fprintf(b, "  activations (step)   %12s  of %12s  (planned arena of forward + backward, micro-batch %lld)\n",
              ts__human_bytes(arena, h1, sizeof h1), ts__human_bytes(arena1, h2, sizeof h2), (long long)mb);
      rc = plan_memory(&x.t->cfg, d, rank, ndevices, x.baseline, b, &refused);
      if (refused) snprintf(why, sizeof why, "%s", ts_last_error());
      fprintf(b, "communication per step per rank (%lld micro-batch%s):\n", (long long)accum, accum == 1 ? "" : "es");
      fprintf(b, "  forward collectives  %12s\n", ts__human_bytes((double)(fwd * accum), h1, sizeof h1));
      fprintf(b, "  backward collectives %12s  (their adjoints)\n", ts__human_bytes((double)(bwd * accum), h1, sizeof h1));
      fprintf(b, "  gradient reduction   %12s  (parameters several ranks hold, reduced over them)\n",
              ts__human_bytes(red, h3, sizeof h3));
    }
  }
  if (fclose(b) && !rc) rc = ts_error_set(TS_ENOMEM, "plan: out of memory");
  if (!rc) *text = mp;
  else free(mp);
  if (!rc && refused) rc = ts_error_set(refused, "%s", why);
  dry_free(&x);
  return rc;
}

/* ---- the predicted step ---- */

/* The job's layout set up dry (dry_setup) and priced by the search's predictor
 * (src/autoparallel/predict.c). */
static int predict(const ts_config *cfg, const ts_autoplan *given, int ndevices, int rank, const ts_cluster *c,
                   ts_step_prediction *out, ts_model_fn model, void *user) {
  memset(out, 0, sizeof *out);
  int rc = ts_cluster_validate(c, c->name);
  if (rc) return rc;
  dry x;
  rc = dry_setup(cfg, given, ndevices, rank, model, user, &x);
  if (!rc)
    rc = ts__autoparallel_predict(x.vt, &x.dc, &x.t->model, ts_optim_kind_num_slots(x.t->cfg.optimizer.name),
                                  x.t->cfg.train.batch_size, ndevices, rank, c, out);
  x.t->model.strategies = NULL;
  dry_free(&x);
  return rc;
}

int ts_trainer_predict(const ts_config *cfg, int ndevices, int rank, const ts_cluster *c, ts_step_prediction *out) {
  return predict(cfg, NULL, ndevices, rank, c, out, NULL, NULL);
}

int ts_trainer_predict_autoplan(const ts_config *cfg, const ts_autoplan *plan, int ndevices, int rank,
                                const ts_cluster *c, ts_step_prediction *out) {
  return predict(cfg, plan, ndevices, rank, c, out, NULL, NULL);
}
