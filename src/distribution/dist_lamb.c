/* LAMB over parameters held in pieces (src/distribution/dist.h, ts_dist_optim_create): its trust
 * ratio needs each parameter's whole norm and its whole update's norm, so the optimizer's
 * per-segment sums of squares (ts_optim_set_norm_reduce) are summed over the ranks holding the
 * pieces: a slice once, a copy several ranks hold weighted by 1/holders. A rank's segments are
 * mapped to global indices (the whole list every rank shares), so ranks whose segment lists
 * differ (optimizer sharding: each rank's part) reduce one array of the same length. */
#include <stdlib.h>
#include <string.h>

#include "dist_impl.h"

struct ts__lamb {
  ts_comm *c;
  int nglob;    /* global segments */
  int nloc;     /* the rank's optimizer segments */
  int *glob;    /* local segment -> global index */
  float *w;     /* local segment -> weight of its sums */
  float *buf;   /* 2 per global segment */
};

static int lamb_reduce(double *sums, int n, void *user) {
  struct ts__lamb *L = user;
  if (n != 2 * L->nloc)
    return ts_error_set(TS_EINVAL, "LAMB: %d norm sums for %d segments", n, L->nloc);
  memset(L->buf, 0, sizeof(float) * 2 * (size_t)L->nglob);
  for (int s = 0; s < L->nloc; s++) {
    L->buf[2 * L->glob[s]] += (float)(sums[2 * s] * L->w[s]);
    L->buf[2 * L->glob[s] + 1] += (float)(sums[2 * s + 1] * L->w[s]);
  }
  int rc = ts_comm_allreduce(L->c, L->buf, L->buf, 2 * (size_t)L->nglob, TS_F32, TS_REDUCE_SUM);
  if (rc) return ts_error_wrap(rc, "LAMB: the norms of the parameters over the ranks holding them");
  for (int s = 0; s < L->nloc; s++) {
    sums[2 * s] = L->buf[2 * L->glob[s]];
    sums[2 * s + 1] = L->buf[2 * L->glob[s] + 1];
  }
  return TS_OK;
}

void ts__lamb_free(struct ts__lamb *L) {
  if (!L) return;
  free(L->glob);
  free(L->w);
  free(L->buf);
  free(L);
}

int ts__lamb_install(ts_dist *d, ts_optim *opt, ts_comm *c, int nglob, int nloc, const int *glob, const float *w) {
  if (!c || ts_optim_get_config(opt)->kind != TS_OPTIM_LAMB) return TS_OK;
  struct ts__lamb *L = calloc(1, sizeof *L);
  if (!L) return ts_error_set(TS_ENOMEM, "LAMB: out of memory");
  L->c = c;
  L->nglob = nglob;
  L->nloc = nloc;
  L->glob = malloc(sizeof(int) * (size_t)(nloc + 1));
  L->w = malloc(sizeof(float) * (size_t)(nloc + 1));
  L->buf = malloc(sizeof(float) * 2 * (size_t)(nglob + 1));
  if (!L->glob || !L->w || !L->buf) {
    ts__lamb_free(L);
    return ts_error_set(TS_ENOMEM, "LAMB: out of memory");
  }
  memcpy(L->glob, glob, sizeof(int) * (size_t)nloc);
  memcpy(L->w, w, sizeof(float) * (size_t)nloc);
  ts__lamb_free(d->sync.lamb);
  d->sync.lamb = L;
  ts_optim_set_norm_reduce(opt, lamb_reduce, L);
  return TS_OK;
}

int ts__lamb_install_sliced(ts_dist *d, ts_optim *opt, const ts_optim_segment *segs, int nseg) {
  ts_params *p = d->r.params;
  ts_comm *c = NULL;
  int n = d->r.size;
  if (d->vt->norm_group) {
    if (!d->vt->norm_group(d, &c, &n)) return TS_OK; /* whole parameters on every rank */
  } else if (d->r.sliced) {
    c = d->world;
  }
  if (!c || ts_optim_get_config(opt)->kind != TS_OPTIM_LAMB) return TS_OK;
  int *glob = malloc(sizeof(int) * (size_t)(nseg + 1)), *part = malloc(sizeof(int) * (size_t)(n + 1));
  float *w = malloc(sizeof(float) * (size_t)(nseg + 1));
  int rc = glob && part && w ? TS_OK : ts_error_set(TS_ENOMEM, "LAMB: out of memory");
  int me = ts_comm_rank(c);
  for (int s = 0; s < nseg && !rc; s++) {
    glob[s] = s; /* every rank of the group has the same store, so the same segments */
    w[s] = 1;
    for (int i = 0; i < ts_params_count(p); i++) {
      if (ts_params_offset(p, i) != segs[s].offset || (ts_params_flags(p, i) & TS_PARAM_STATE)) continue;
      int np = ts_params_rank_partition(p, i, n, part);
      if (np < 0) {
        rc = np;
        break;
      }
      int h = 0;
      for (int r = 0; r < n; r++) h += part[r] == part[me];
      w[s] = 1.0f / (float)(h > 0 ? h : 1);
      break;
    }
  }
  if (!rc) rc = ts__lamb_install(d, opt, c, nseg, nseg, glob, w);
  free(glob);
  free(part);
  free(w);
  return rc;
}
