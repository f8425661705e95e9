/* Gradient reduction over the ranks that hold the same parameter slice (src/distribution/dist.h):
 * one bucketed reducer (dp.c) per group of parameters that share a partition of the ranks, each
 * on its own communicator; and the communicators of a pass's slots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buckets.h"
#include "distribution/dist.h"

struct ts_grad_reducer {
  int ngroups, cap; /* the groups, and room for them (grown by doubling: no fixed limit) */
  ts__buckets **dp;
  ts_comm **comm;
  int *size;
  ts_comm_topo **topo; /* groups spanning hosts: their topology (hierarchical reduction) */
  char note[1024];    /* the first group spanning hosts: its hosts and how it reduces */
  double wait;
  size_t send_numel;  /* the buckets' send slots (floats, all groups) */
};

/* Group k's buckets all-reduced from a separate send buffer where use says (NULL: all). */
static int set_send(ts_grad_reducer *r, int k, const unsigned char *use) {
  int nb = ts__buckets_num_buckets(r->dp[k]);
  unsigned char *all = NULL;
  if (!use && !(use = all = malloc((size_t)nb + 1))) return ts_error_set(TS_ENOMEM, "gradient reducer: out of memory");
  if (all) memset(all, 1, (size_t)nb + 1);
  size_t n = 0;
  int rc = ts__buckets_set_send(r->dp[k], use, &n);
  r->send_numel += n;
  free(all);
  return rc;
}

/* Room for at least n groups in r (and n partitions of N ranks in *parts). */
static int grow(ts_grad_reducer *r, int n, int N, int **parts) {
  if (n <= r->cap) return TS_OK;
  int nc = r->cap ? 2 * r->cap : 8;
  while (nc < n) nc *= 2;
  ts__buckets **dp = realloc(r->dp, sizeof *dp * (size_t)nc);
  if (dp) r->dp = dp;
  ts_comm **cm = realloc(r->comm, sizeof *cm * (size_t)nc);
  if (cm) r->comm = cm;
  int *sz = realloc(r->size, sizeof *sz * (size_t)nc);
  if (sz) r->size = sz;
  ts_comm_topo **tp = realloc(r->topo, sizeof *tp * (size_t)nc);
  if (tp) r->topo = tp;
  int *pt = realloc(*parts, sizeof(int) * (size_t)N * (size_t)nc);
  if (pt) *parts = pt;
  if (!dp || !cm || !sz || !tp || !pt) return ts_error_set(TS_ENOMEM, "gradient reducer: out of memory");
  memset(r->dp + r->cap, 0, sizeof *dp * (size_t)(nc - r->cap));
  memset(r->comm + r->cap, 0, sizeof *cm * (size_t)(nc - r->cap));
  memset(r->topo + r->cap, 0, sizeof *tp * (size_t)(nc - r->cap));
  r->cap = nc;
  return TS_OK;
}

void ts_grad_reducer_free(ts_grad_reducer *r) {
  if (!r) return;
  for (int k = 0; k < r->ngroups; k++) {
    ts__buckets_free(r->dp[k]);
    ts_comm_topo_free(r->topo[k]);
    ts_comm_free(r->comm[k]);
  }
  free(r->dp);
  free(r->comm);
  free(r->size);
  free(r->topo);
  free(r);
}

/* parallel.allreduce for group k: learns its hosts; over several, chooses flat or hierarchical
 * (forced, or auto: the cheaper by the cost model of the cluster's links for a bucket of
 * bucket_mb), says so on the group's first rank. Collective over the group. */
static int choose_reduction(ts_grad_reducer *r, int k, const ts_grad_reducer_config *cfg, double bucket_mb) {
  int mode = cfg->allreduce;
  if (r->size[k] < 2) return TS_OK;
  if (cfg->wire != TS_F32 && mode != TS_ALLREDUCE_FLAT) {
    if (mode == TS_ALLREDUCE_HIER || mode == TS_ALLREDUCE_FLAT_SEND)
      return ts_error_set(TS_ECONFIG, "parallel.allreduce %s: the gradients travel in %s (parallel.comm_dtype); it "
                          "is for f32 only", mode == TS_ALLREDUCE_HIER ? "hierarchical" : "flat_send",
                          ts_dtype_name(cfg->wire));
    return TS_OK;
  }
  ts_comm_topo *t = NULL;
  int rc = ts_comm_topo_create(r->comm[k], &t);
  if (rc) return ts_error_wrap(rc, "learning which ranks share a host");
  int hosts = ts_comm_topo_num_hosts(t), lead = ts_comm_rank(r->comm[k]) == 0;
  char desc[512], why[512] = "";
  ts_comm_topo_describe(t, desc, sizeof desc);
  int hier = mode == TS_ALLREDUCE_HIER, nsend = 0, nb = ts__buckets_num_buckets(r->dp[k]);
  unsigned char *use = calloc((size_t)nb + 1, 1);
  if (!use) {
    ts_comm_topo_free(t);
    return ts_error_set(TS_ENOMEM, "gradient reducer: out of memory");
  }
  if (mode == TS_ALLREDUCE_FLAT) snprintf(why, sizeof why, " (parallel.allreduce flat)");
  if (mode == TS_ALLREDUCE_FLAT_SEND) { /* forced, on any number of hosts */
    snprintf(why, sizeof why, " from a separate send buffer (parallel.allreduce flat_send)");
    memset(use, 1, (size_t)nb);
    nsend = nb;
  }
  if (mode == TS_ALLREDUCE_AUTO) {
    const char *name = cfg->cluster && cfg->cluster[0] ? cfg->cluster : "local";
    double bytes = bucket_mb * 1024 * 1024, tf = 0, th = 0, ts = HUGE_VAL;
    char cname[64] = "";
    if (hosts < 2) {
      hier = 0;
    } else if (!ts_comm_topo_uniform(t)) {
      snprintf(why, sizeof why, " (auto: hosts of unequal rank counts, which the cost model does not price)");
    } else if (!cfg->price) {
      snprintf(why, sizeof why, " (auto: no cost model given)");
    } else if (cfg->price(name, hosts, r->size[k] / hosts, bytes, &tf, &th, &ts, cname, sizeof cname)) {
      snprintf(why, sizeof why, " (auto: no cluster description to price it: %s)", ts_last_error());
    } else {
      hier = th < fmin(tf, ts); /* against the better flat variant (ts: HUGE_VAL where not measured) */
      /* flat: each bucket from a separate send buffer where that is predicted faster for its size
       * (measured by tessera calibrate on this layout; never otherwise) */
      for (int b = 0; !hier && b < nb; b++) {
        size_t off, len, o2;
        const size_t *cnt;
        double f1 = 0, h1 = 0, s1 = 0;
        ts__buckets_part(r->dp[k], b, &off, &len, &cnt, &o2);
        if (!cfg->price(name, hosts, r->size[k] / hosts, (double)len * sizeof(float), &f1, &h1, &s1, cname, sizeof cname))
          nsend += use[b] = s1 < f1;
      }
      char sb[160] = "; flat from a separate send buffer not measured";
      if (isfinite(ts))
        snprintf(sb, sizeof sb, "; flat from a separate send buffer %.3g ms: %d of %d buckets from one, predicted "
                 "faster for their size", ts * 1e3, nsend, nb);
      snprintf(why, sizeof why, " (auto: a %.3g MiB bucket predicted %.3g ms hierarchical vs %.3g ms flat on cluster "
               "%s%s)", bucket_mb, th * 1e3, tf * 1e3, cname, hier ? "" : sb);
    }
  }
  int rc0 = nsend ? set_send(r, k, use) : TS_OK;
  free(use);
  if (rc0) {
    ts_comm_topo_free(t);
    return rc0;
  }
  int say = hosts > 1 || hier || nsend;
  if (say && !r->note[0]) { /* a note longer than its buffer is cut */
    const int nn = snprintf(r->note, sizeof r->note, "gradient reduction over %d ranks on %s: buckets all-reduced %s%.300s",
                            r->size[k], desc,
                            hier ? "hierarchically (inside each host, between hosts, broadcast inside; overlapped with backward)" : "flat", why);
    (void)nn;
  }
  if (lead && say) ts_log(TS_LOG_INFO, "%s", r->note);
  if (!hier) {
    ts_comm_topo_free(t);
    return TS_OK;
  }
  r->topo[k] = t;
  ts__buckets_set_hier(r->dp[k], t);
  return TS_OK;
}

int ts_grad_reducer_create(ts_comm *world, ts_params *p, const ts_graph *g,
                           const ts_grad_reducer_config *cfg, ts_grad_reducer **out) {
  *out = NULL;
  int N = ts_comm_size(world), R = ts_comm_rank(world), np = ts_params_count(p);
  ts_grad_reducer *r = calloc(1, sizeof *r);
  int *part = malloc(sizeof(int) * (size_t)N), *group = malloc(sizeof(int) * (size_t)(np + 1));
  int *parts = NULL, *member = malloc(sizeof(int) * (size_t)(np + 1));
  int rc = r ? grow(r, 1, N, &parts) : TS_ENOMEM;
  if (!r || rc || !part || !group || !parts || !member) {
    rc = ts_error_set(TS_ENOMEM, "gradient reducer: out of memory");
    goto done;
  }
  for (int i = 0; i < np && !rc; i++) {
    group[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    int n = ts_params_rank_partition(p, i, N, part);
    if (n < 0) {
      rc = n;
      break;
    }
    if (n == N) continue; /* every rank holds its own slice: nothing to reduce */
    int k;
    for (k = 0; k < r->ngroups; k++)
      if (!memcmp(parts + k * N, part, sizeof(int) * (size_t)N)) break;
    if (k == r->ngroups) {
      if ((rc = grow(r, k + 1, N, &parts))) break;
      memcpy(parts + k * N, part, sizeof(int) * (size_t)N);
      r->ngroups++;
    }
    group[i] = k;
  }
  /* groups in the same order on every rank: each split is collective over world */
  for (int k = 0; k < r->ngroups && !rc; k++) {
    rc = ts_comm_split(world, parts[k * N + R], R, &r->comm[k]);
    if (rc) break;
    r->size[k] = ts_comm_size(r->comm[k]);
    for (int i = 0; i < np; i++) member[i] = group[i] == k;
    double mb = cfg->bucket_mb > 0 ? cfg->bucket_mb : TS_BUCKET_MB_DEFAULT;
    rc = ts__buckets_create_split(r->comm[k], p, g, mb, cfg->mean, cfg->wire, member, cfg->fusion_splits,
                                  cfg->nfusion_splits, &r->dp[k]);
    if (!rc) rc = choose_reduction(r, k, cfg, mb);
  }
done:
  free(part);
  free(group);
  free(parts);
  free(member);
  if (rc) {
    ts_grad_reducer_free(r);
    return rc;
  }
  *out = r;
  return TS_OK;
}

const char *ts_grad_reducer_note(const ts_grad_reducer *r) { return r ? r->note : ""; }

int ts_grad_reducer_num_groups(const ts_grad_reducer *r) { return r ? r->ngroups : 0; }

static void hook(const ts_hook_info *e, void *user) {
  ts_grad_reducer *r = user;
  for (int k = 0; k < r->ngroups; k++) ts__buckets_hook(e, r->dp[k]);
}

int ts_grad_reducer_attach(ts_grad_reducer *r, ts_plan *plan) { return ts_plan_add_hook(plan, hook, r); }

void ts_grad_reducer_begin(ts_grad_reducer *r, float *grads) {
  for (int k = 0; k < r->ngroups; k++) ts__buckets_begin(r->dp[k], grads);
}

int ts_grad_reducer_finish(ts_grad_reducer *r) {
  r->wait = 0;
  int rc = TS_OK;
  for (int k = 0; k < r->ngroups; k++) {
    int e = ts__buckets_finish(r->dp[k]);
    r->wait += ts__buckets_wait_seconds(r->dp[k]);
    if (e && !rc) rc = ts_error_wrap(e, "gradient reduction over a group of %d ranks", r->size[k]);
  }
  return rc;
}

double ts_grad_reducer_wait_seconds(const ts_grad_reducer *r) { return r ? r->wait : 0; }

int ts_grad_reducer_set_prof(ts_grad_reducer *r, ts_prof *p) {
  int first = 0, rc = TS_OK;
  for (int k = 0; r && k < r->ngroups && !rc; k++) {
    rc = ts__buckets_set_prof(r->dp[k], p, first, 1 + first);
    first += ts__buckets_num_buckets(r->dp[k]);
  }
  return rc;
}

size_t ts_grad_reducer_send_bytes(const ts_grad_reducer *r) { return r ? r->send_numel * sizeof(float) : 0; }

int ts_grad_reducer_num_buckets(const ts_grad_reducer *r) {
  int n = 0;
  for (int k = 0; r && k < r->ngroups; k++) n += ts__buckets_num_buckets(r->dp[k]);
  return n;
}

int ts_dist_slot_comms(const ts_parallel *p, ts_comm *world, ts_plan *plan, ts_comm **comms) {
  int ns = ts_parallel_num_slots(p), rank = ts_parallel_rank(p);
  if (ts_comm_size(world) != ts_parallel_ndevices(p))
    return ts_error_set(TS_EINVAL, "parallel: the communicator has %d ranks, the plan is for %d",
                        ts_comm_size(world), ts_parallel_ndevices(p));
  for (int s = 0; s < ns; s++) comms[s] = NULL;
  int rc = TS_OK;
  for (int s = 0; s < ns && !rc; s++) {
    int color = ts_parallel_slot_color(p, s);
    rc = color < 0 ? color : ts_comm_split(world, color, rank, &comms[s]);
    if (rc) rc = ts_error_wrap(rc, "parallel: creating the group of communicator slot %d", s);
    if (!rc && plan) rc = ts_plan_set_comm(plan, s, comms[s]);
  }
  if (rc)
    for (int k = 0; k < ns; k++) {
      ts_comm_free(comms[k]);
      comms[k] = NULL;
    }
  return rc;
}
