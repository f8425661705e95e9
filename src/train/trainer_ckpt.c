/* Sliced checkpoints of a training job (docs/checkpoints.md): every rank writes its own pieces
 * (ts_dist_pieces: its slices, its optimizer shard, its pipeline stage's entries), a piece several
 * ranks hold written once by the lowest of them, into a staging directory; rank 0 writes the
 * manifest last and renames the directory into place. Loading: every rank reads the manifest and
 * only the chunks of the rank files holding the pieces it needs, whatever layout wrote them.
 * `tessera ckpt reshard` re-cuts a checkpoint for another layout in one process, from the dry
 * ranks of the new layout.
 *
 * The save runs in three phases: (1) collective on the main thread: the staging directory and the
 * checkpoint id from rank 0, the pieces and which rank writes each (hashes all-gathered), rank 0's
 * manifest skeleton; (2) local I/O: ts_ckpt_slice_write of the rank's pieces; (3) collective: the
 * records to rank 0, the manifest, the commit, the status to every rank. checkpoint.async runs
 * (2) and (3) on a writer thread (trainer_async.c) from a snapshot of the pieces, (3) over a
 * duplicate of the world communicator. Saves
 * happen at step boundaries only (ts_trainer_fit after a step's update), so there is no
 * accumulation state to save. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/checkpoint.h"
#include "tessera/strategy.h"
#include "distribution/query.h"
#include "config_dist.h"
#include "train_impl.h"
#include "base/afile.h"
#include "base/rfile.h"

#define MAX_SLOTS 8

/* The optimizer's slots: names and data (data NULL without an optimizer). */
static int slots_of(ts_trainer *t, int with_optimizer, const char **names, float **data) {
  int n = with_optimizer && t->opt ? ts_optim_num_slots(t->opt) : 0;
  if (n > MAX_SLOTS) n = MAX_SLOTS;
  for (int k = 0; k < n; k++) {
    names[k] = ts_optim_slot_name(t->opt, k);
    data[k] = ts_optim_slot_data(t->opt, k);
  }
  return n;
}

static int add_step(ts_piece_list *l, int64_t *step) {
  ts_shape s0 = ts_shape_make(0, NULL);
  ts_region r;
  ts_region_whole(&r, &s0);
  return ts_piece_list_add(l, "optim.step", TS_I64, &s0, &r, step);
}

int ts__trainer_ckpt_format(const ts_trainer *t) {
  int f = t->cfg.checkpoint.format;
  if (f != TS_CFG_CKPT_AUTO) return f;
  size_t rep = 0, sh = 0;
  int sharded = ts_dist_optim_sharded(t->dist, &rep, &sh);
  return t->run->sliced || sharded || ts__dist_stages(t->dist) > 1 ? TS_CFG_CKPT_SLICED : TS_CFG_CKPT_WHOLE;
}

/* The layout in force, for the manifest. */
static void layout_json(const ts_config *c, int world, int sliced, int strategy_file, char *buf, size_t cap) {
  ts_dist_config dc; /* the layout and the sync object write their own keys */
  ts_config_dist(c, &dc);
  ts__dist_manifest_layout(&dc, ts_parallel_mode_name(c->parallel.mode), world, sliced, strategy_file, buf, cap);
}

/* keep[i] = 1 for the pieces no lower rank holds (of each rank's list of hashes, in rank order). */
static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Which of this rank's n pieces it writes: those whose hash no lower rank has (all: the hashes of
 * every rank, counts[r] of them, in rank order). */
static int mark_own(const uint64_t *all, const size_t *counts, int rank, const uint64_t *mine, int n, char *keep) {
  size_t lower = 0;
  for (int r = 0; r < rank; r++) lower += counts[r];
  uint64_t *s = malloc(sizeof(uint64_t) * (lower + 1));
  if (!s) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  memcpy(s, all, sizeof(uint64_t) * lower);
  qsort(s, lower, sizeof *s, cmp_u64);
  for (int i = 0; i < n; i++) keep[i] = !bsearch(&mine[i], s, lower, sizeof *s, cmp_u64);
  free(s);
  return TS_OK;
}

/* Sends every rank's text to every rank (lengths, then the bytes); *all holds them one after the
 * other, lens[r] each. */
static int gather_texts(ts_comm *w, int N, const char *mine, char **all, size_t *lens) {
  int64_t l = (int64_t)strlen(mine), *ls = calloc((size_t)N, sizeof(int64_t));
  size_t *displs = calloc((size_t)N, sizeof(size_t)), total = 0;
  int rc = !ls || !displs ? ts_error_set(TS_ENOMEM, "checkpoint: out of memory") : TS_OK;
  if (!rc) rc = ts_comm_allgather(w, &l, ls, 1, TS_I64);
  for (int r = 0; r < N && !rc; r++) {
    lens[r] = (size_t)ls[r];
    displs[r] = total;
    total += lens[r];
  }
  if (!rc && !(*all = malloc(total + 1))) rc = ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  if (!rc) rc = ts_comm_allgatherv(w, mine, *all, lens, displs, TS_U8);
  free(ls);
  free(displs);
  return rc;
}

/* (1) collective over the world: the staging directory and the id from rank 0, the pieces and
 * which this rank writes (into j->own, data pointing into the rank's live state), and on rank 0
 * the manifest's skeleton (identity, position, layout, tensors) and the strategy file. A local
 * failure is kept in j->rc (or j->mrc on rank 0) for phase 3 to report; only a failure of the
 * job's communication (every rank sees it) or of rank 0's staging directory is returned. */
int ts__sliced_begin(ts_trainer *t, const char *final, ts__sliced_job *j) {
  memset(j, 0, sizeof *j);
  int hrc = ts_dist_to_host(t->dist, t->opt); /* a GPU job: the device's state is the newest */
  if (hrc) return hrc;
  ts_comm *w = ts_dist_world(t->dist);
  int N = w ? ts_comm_size(w) : 1, rank = w ? ts_comm_rank(w) : 0, rc = TS_OK, rc0 = TS_OK;
  j->rank = rank;
  j->N = N;
  snprintf(j->final, sizeof j->final, "%s", final);
  struct {
    int32_t rc;
    char id[64];
    char staging[4096];
  } head;
  memset(&head, 0, sizeof head);
  if (rank == 0) {
    rc0 = ts_ckpt_stage_begin(final, head.staging, sizeof head.staging);
    head.rc = rc0;
    snprintf(head.id, sizeof head.id, "%08" PRId64 "-%" PRIx64 "-%lx", t->step,
             (uint64_t)(ts_time_now() * 1e9), (long)getpid());
  }
  if (w && (rc = ts_comm_broadcast(w, &head, sizeof head, TS_U8, 0))) return ts_error_wrap(rc, "checkpoint %s", final);
  if (head.rc) return rank == 0 ? rc0 : ts_error_set(TS_EIO, "checkpoint %s: rank 0 could not prepare it", final);
  snprintf(j->id, sizeof j->id, "%s", head.id);
  snprintf(j->staging, sizeof j->staging, "%s", head.staging);
  j->step = t->step;
  /* the pieces and who writes each */
  const char *names[MAX_SLOTS];
  float *data[MAX_SLOTS];
  int ns = slots_of(t, 1, names, data);
  j->optim_step = t->opt ? ts_optim_get_step(t->opt) : 0;
  ts_piece_list l = {0};
  rc = ts_dist_pieces(t->dist, ns, names, data, &l);
  if (!rc && t->opt) rc = add_step(&l, &j->optim_step);
  uint64_t *h = calloc((size_t)l.n + 1, sizeof *h), *all = NULL;
  size_t *counts = calloc((size_t)N, sizeof *counts), *displs = calloc((size_t)N, sizeof *displs), total = 0;
  char *keep = calloc((size_t)l.n + 1, 1);
  if (!rc && (!h || !counts || !displs || !keep)) rc = ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  for (int i = 0; i < l.n && h; i++) h[i] = ts_piece_hash(&l.v[i]);
  int64_t cnt = rc ? -1 : l.n, *cnts = calloc((size_t)N, sizeof(int64_t));
  int failed = 0, crc = TS_OK;
  if (w) {
    crc = cnts ? ts_comm_allgather(w, &cnt, cnts, 1, TS_I64) : TS_ENOMEM;
    for (int r = 0; r < N && !crc; r++) failed |= cnts[r] < 0;
    for (int r = 0; r < N && !crc; r++) {
      counts[r] = cnts[r] > 0 ? (size_t)cnts[r] : 0;
      displs[r] = total;
      total += counts[r];
    }
    if (!crc && !(all = malloc(sizeof(uint64_t) * (total + 1)))) crc = TS_ENOMEM;
    /* every rank takes part even after a local failure (its count is then 0) */
    if (!crc) crc = ts_comm_allgatherv(w, h ? h : (uint64_t *)&cnt, all, counts, displs, TS_I64);
  } else if (cnts) {
    cnts[0] = cnt;
    counts[0] = l.n;
    failed = cnt < 0;
    all = h;
  }
  if (crc) { /* the job's communication failed: every rank sees it */
    rc = ts_error_wrap(crc ? crc : TS_ECOMM, "checkpoint %s: exchanging the pieces' hashes", final);
    ts__sliced_job_free(j);
    goto out;
  }
  if (!rc && !failed) rc = mark_own(all, counts, rank, h, l.n, keep);
  /* a rank that failed to list its pieces reports it in phase 3; the others then write nothing */
  for (int i = 0; !rc && !failed && i < l.n; i++)
    if (keep[i]) rc = ts_piece_list_add(&j->own, l.v[i].name, l.v[i].dtype, &l.v[i].shape, &l.v[i].region, l.v[i].data);
  j->rc = rc;
  if (rc) snprintf(j->msg, sizeof j->msg, "%s", ts_last_error());
  rc = TS_OK;
  if (rank == 0) { /* the manifest's skeleton: what phase 3 needs of the trainer */
    ts_ckpt_state st;
    ts__trainer_ckpt_state(t, &st);
    ts_piece_list tens = {0};
    const ts_strategy_set *ss = ts_dist_strategies(t->dist);
    char lay[600];
    layout_json(&t->cfg, N, t->run->sliced, ss != NULL, lay, sizeof lay);
    int mrc = ts_ckpt_manifest_create(&st, head.id, N, &j->m);
    if (!mrc) mrc = ts_ckpt_manifest_set_layout(j->m, lay);
    if (!mrc) mrc = ts_dist_tensors(t->dist, t->opt != NULL, ns, names, &tens);
    for (int i = 0; i < tens.n && !mrc; i++) mrc = ts_ckpt_manifest_add_tensor(j->m, tens.v[i].name, tens.v[i].dtype, &tens.v[i].shape);
    if (!mrc && ss) {
      char sp[4200];
      snprintf(sp, sizeof sp, "%s/strategy.json", head.staging);
      mrc = ts_strategy_set_save(ss, sp);
      j->strategy = 1;
    }
    j->mrc = mrc;
    if (mrc) snprintf(j->mmsg, sizeof j->mmsg, "%s", ts_last_error());
    ts_piece_list_free(&tens);
  }
out:
  if (all != h) free(all);
  free(h);
  free(cnts);
  free(counts);
  free(displs);
  free(keep);
  ts_piece_list_free(&l);
  return rc;
}

size_t ts__sliced_job_bytes(const ts__sliced_job *j) {
  size_t b = 0;
  for (int i = 0; i < j->own.n; i++) b += (size_t)ts_region_numel(&j->own.v[i].region) * ts_dtype_size(j->own.v[i].dtype);
  return b;
}

void ts__sliced_job_snapshot(ts__sliced_job *j, unsigned char *buf) {
  size_t off = 0;
  for (int i = 0; i < j->own.n; i++) {
    size_t b = (size_t)ts_region_numel(&j->own.v[i].region) * ts_dtype_size(j->own.v[i].dtype);
    if (b) memcpy(buf + off, j->own.v[i].data, b);
    j->own.v[i].data = buf + off;
    off += b;
  }
}

void ts__sliced_job_free(ts__sliced_job *j) {
  ts_piece_list_free(&j->own);
  ts_ckpt_manifest_free(j->m);
  j->m = NULL;
}

/* (2) this rank's file, then (3) collective over w (the world, or the writer's duplicate of it):
 * the records to rank 0, which completes the manifest, writes it and commits the directory; its
 * status to every rank. Every rank returns the same success or failure; a failing rank's own
 * message names its file. Touches only the job (its pieces' data, the skeleton): safe on a
 * thread while training goes on when the pieces point into a snapshot. */
int ts__sliced_finish(ts__sliced_job *j, ts_comm *w) {
  int N = j->N, rank = j->rank, rc = TS_OK;
  const char *final = j->final;
  char *record = NULL, msg[1200] = "";
  int wrc = j->rc;
  if (!wrc) wrc = ts_ckpt_slice_write(j->staging, rank, j->id, j->step, j->own.v, j->own.n, &record);
  if (wrc) {
    snprintf(msg, sizeof msg, "%s", j->rc ? j->msg : ts_last_error());
    free(record);
    record = NULL;
    ts_ckpt_error_record(rank, msg, &record);
  }
  char *texts = NULL;
  size_t *lens = calloc((size_t)N, sizeof *lens);
  int grc = !lens || !record ? TS_ENOMEM : TS_OK;
  if (w && !grc) grc = gather_texts(w, N, record, &texts, lens);
  else if (!grc) {
    texts = strdup(record);
    lens[0] = strlen(record);
  }
  int32_t status[2] = {TS_OK, -1}; /* rank 0's result and the first failing rank */
  if (rank == 0) {
    ts_ckpt_manifest *m = j->m;
    int mrc = j->mrc ? ts_error_set(j->mrc, "%s", j->mmsg) : TS_OK;
    if (!mrc && grc) mrc = ts_error_set(grc, "checkpoint %s: collecting the ranks' records", final);
    size_t off = 0;
    for (int r = 0; r < N && !mrc; r++) {
      char *rec = strndup(texts + off, lens[r]);
      off += lens[r];
      mrc = rec ? ts_ckpt_manifest_add_record(m, rec) : TS_ENOMEM;
      if (mrc) status[1] = r;
      free(rec);
    }
    if (!mrc && j->strategy) mrc = ts_ckpt_manifest_add_file(m, j->staging, "strategy.json");
    if (!mrc) mrc = ts_ckpt_manifest_check(m);
    if (!mrc) mrc = ts_ckpt_manifest_write(m, j->staging);
    if (!mrc) mrc = ts_ckpt_stage_commit(j->staging, final);
    if (mrc) {
      ts_error_wrap(mrc, "checkpoint %s", final);
      ts_ckpt_stage_abort(j->staging);
    }
    status[0] = mrc;
  }
  int brc = w ? ts_comm_broadcast(w, status, 2, TS_I32, 0) : TS_OK;
  if (brc) rc = ts_error_wrap(brc, "checkpoint %s", final);
  else if (rank == 0) rc = status[0];
  else if (status[0] && status[1] != rank)
    rc = ts_error_set(status[0], "checkpoint %s: not written (rank 0 reports why%s)", final,
                      status[1] >= 0 ? ", naming the rank at fault" : "");
  else if (status[0]) rc = ts_error_set(status[0], "%s", msg); /* this rank's own failure: its message */
  free(texts);
  free(lens);
  free(record);
  return rc;
}

int ts_trainer_save_sliced(ts_trainer *t, const char *final) {
  ts__sliced_job j;
  int rc = ts__sliced_begin(t, final, &j);
  if (!rc) rc = ts__sliced_finish(&j, ts_dist_world(t->dist));
  ts__sliced_job_free(&j);
  return rc;
}

int ts__trainer_load_sliced(ts_trainer *t, const char *dir, int strict, int with_optimizer, ts_ckpt_state *st) {
  ts_ckpt_manifest *m = NULL;
  ts_piece_list tens = {0}, want = {0};
  const char *names[MAX_SLOTS];
  float *data[MAX_SLOTS];
  int ns = slots_of(t, with_optimizer, names, data), opt = with_optimizer && t->opt;
  int64_t step = t->opt ? ts_optim_get_step(t->opt) : 0;
  int rc = ts_ckpt_manifest_load(dir, &m);
  if (!rc) rc = ts_dist_tensors(t->dist, opt, ns, names, &tens);
  if (!rc) rc = ts_ckpt_manifest_match(m, st, tens.v, tens.n, opt, strict);
  if (!rc) rc = ts_dist_pieces(t->dist, ns, names, data, &want);
  if (!rc && opt) rc = add_step(&want, &step);
  if (!rc) rc = ts_ckpt_sliced_read(m, want.v, want.n, strict);
  ts_ckpt_info info;
  memset(&info, 0, sizeof info);
  if (!rc) rc = ts_ckpt_manifest_info(m, &info);
  if (!rc) {
    st->pos = info.pos;
    if (opt) ts_optim_set_step(t->opt, step);
  }
  ts_ckpt_info_free(&info);
  ts_piece_list_free(&tens);
  ts_piece_list_free(&want);
  ts_ckpt_manifest_free(m);
  /* every rank loads or none goes on: the first failing rank's number to all */
  ts_comm *w = ts_dist_world(t->dist);
  if (w) {
    int32_t bad = rc ? ts_comm_rank(w) : INT32_MAX;
    char keep[1200];
    snprintf(keep, sizeof keep, "%s", rc ? ts_last_error() : "");
    int crc = ts_comm_allreduce(w, &bad, &bad, 1, TS_I32, TS_REDUCE_MIN);
    if (crc) return ts_error_wrap(crc, "checkpoint %s", dir);
    if (rc) return ts_error_set(rc, "%s", keep);
    if (bad != INT32_MAX)
      return ts_error_set(TS_EIO, "checkpoint %s: rank %d could not load its pieces (its message says why)", dir, (int)bad);
  }
  return rc;
}

/* ---- re-cutting a checkpoint for another layout, in one process ---- */

int ts_trainer_reshard(const ts_config *cfg, int ndevices, const char *src, const char *out) {
  if (!cfg || !src || !out || ndevices < 1) return ts_error_set(TS_EINVAL, "reshard: bad arguments");
  ts_ckpt_manifest *m = NULL;
  int rc = ts_ckpt_manifest_load(src, &m);
  if (rc) return rc;
  const char *names[MAX_SLOTS];
  int ns = ts_optim_kind_num_slots(cfg->optimizer.name);
  if (ns > MAX_SLOTS) ns = MAX_SLOTS;
  for (int k = 0; k < ns; k++) names[k] = ts_optim_kind_slot_name(cfg->optimizer.name, k);
  ts_piece_list *lists = calloc((size_t)ndevices, sizeof *lists), tens = {0};
  uint64_t **hs = calloc((size_t)ndevices, sizeof *hs);
  int64_t step = 0;
  if (!lists || !hs) rc = ts_error_set(TS_ENOMEM, "reshard: out of memory");
  /* every target rank's pieces, from its dry build */
  for (int r = 0; r < ndevices && !rc; r++) {
    rc = ts__train_dry_pieces(cfg, ndevices, r, ns, names, &lists[r], r == 0 ? &tens : NULL);
    if (!rc) rc = add_step(&lists[r], &step);
    if (rc) ts_error_wrap(rc, "reshard: the new layout's rank %d of %d", r, ndevices);
    if (!rc && !(hs[r] = malloc(sizeof(uint64_t) * ((size_t)lists[r].n + 1)))) rc = ts_error_set(TS_ENOMEM, "reshard: out of memory");
    for (int i = 0; !rc && i < lists[r].n; i++) hs[r][i] = ts_piece_hash(&lists[r].v[i]);
  }
  char *yaml = NULL; /* cfg itself, not a struct copy: a copy would alias its owned lists */
  if (!rc) rc = ts_config_dump_string(cfg, &yaml);
  ts_ckpt_info info;
  memset(&info, 0, sizeof info);
  if (!rc) rc = ts_ckpt_manifest_info(m, &info);
  ts_ckpt_state st;
  memset(&st, 0, sizeof st);
  st.model = ts_model_kind_name(cfg->model.name);
  st.config_hash = ts_config_hash(cfg);
  if (!rc) rc = ts_ckpt_manifest_match(m, &st, tens.v, tens.n, 1, 1);
  char staging[4096] = "", id[64];
  snprintf(id, sizeof id, "%08" PRId64 "-%" PRIx64 "-%lx-reshard", info.pos.step, (uint64_t)(ts_time_now() * 1e9),
           (long)getpid());
  ts_ckpt_manifest *nm = NULL;
  if (!rc) {
    st.config_yaml = yaml;
    st.version = info.version;
    st.pos = info.pos;
    rc = ts_ckpt_manifest_create(&st, id, ndevices, &nm);
  }
  if (!rc) {
    char lay[600];
    layout_json(cfg, ndevices, 0, 0, lay, sizeof lay);
    rc = ts_ckpt_manifest_set_layout(nm, lay);
  }
  for (int i = 0; i < tens.n && !rc; i++) rc = ts_ckpt_manifest_add_tensor(nm, tens.v[i].name, tens.v[i].dtype, &tens.v[i].shape);
  if (!rc) rc = ts_ckpt_stage_begin(out, staging, sizeof staging);
  /* each rank's own pieces read from the source and written, one rank at a time */
  size_t seen_n = 0, seen_cap = 0;
  uint64_t *seen = NULL; /* the lower ranks' hashes, sorted */
  for (int r = 0; r < ndevices && !rc; r++) {
    ts_piece_list own = {0};
    for (int i = 0; i < lists[r].n && !rc; i++) {
      if (seen_n && bsearch(&hs[r][i], seen, seen_n, sizeof *seen, cmp_u64)) continue; /* a lower rank writes it */
      const ts_piece *p = &lists[r].v[i];
      rc = ts_piece_list_add_copy(&own, p->name, p->dtype, &p->shape, &p->region, NULL);
    }
    if (!rc && seen_n + (size_t)lists[r].n > seen_cap) {
      seen_cap = 2 * (seen_n + (size_t)lists[r].n) + 16;
      uint64_t *q = realloc(seen, sizeof *q * seen_cap);
      if (!q) rc = ts_error_set(TS_ENOMEM, "reshard: out of memory");
      else seen = q;
    }
    for (int i = 0; i < lists[r].n && !rc; i++) seen[seen_n++] = hs[r][i];
    if (!rc) qsort(seen, seen_n, sizeof *seen, cmp_u64);
    char *rec = NULL;
    if (!rc) rc = ts_ckpt_sliced_read(m, own.v, own.n, 1);
    if (!rc) rc = ts_ckpt_slice_write(staging, r, id, info.pos.step, own.v, own.n, &rec);
    if (!rc) rc = ts_ckpt_manifest_add_record(nm, rec);
    free(rec);
    ts_piece_list_free(&own);
  }
  if (!rc) rc = ts_ckpt_manifest_check(nm);
  if (!rc) rc = ts_ckpt_manifest_write(nm, staging);
  if (!rc) rc = ts_ckpt_stage_commit(staging, out);
  if (rc && staging[0]) ts_ckpt_stage_abort(staging);
  free(seen);
  for (int r = 0; lists && r < ndevices; r++) {
    ts_piece_list_free(&lists[r]);
    free(hs ? hs[r] : NULL);
  }
  free(lists);
  free(hs);
  ts_piece_list_free(&tens);
  ts_ckpt_info_free(&info);
  ts_ckpt_manifest_free(nm);
  ts_ckpt_manifest_free(m);
  free(yaml);
  return rc;
}

/* ---- per-rank checkpoint directories ---- */

/* path made absolute against the working directory (malloc'ed; NULL out of memory). */
static char *abs_path(const char *path) {
  if (path[0] == '/') return strdup(path);
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return strdup(path);
  size_t n = strlen(cwd) + strlen(path) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", cwd, path);
  return s;
}

/* Every rank's absolute path; owner[r] = the lowest rank with r's path. Collective. */
static int gather_paths(ts_comm *w, const char *path, int **owner_out) {
  int N = ts_comm_size(w);
  char *mine = abs_path(path), *texts = NULL;
  size_t *lens = calloc((size_t)N, sizeof *lens);
  int *owner = calloc((size_t)N, sizeof *owner);
  int rc = !mine || !lens || !owner ? ts_error_set(TS_ENOMEM, "checkpoint: out of memory") : TS_OK;
  if (!rc) rc = gather_texts(w, N, mine, &texts, lens);
  size_t *off = rc ? NULL : calloc((size_t)N, sizeof *off);
  if (!rc && !off) rc = ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  for (int r = 0; !rc && r < N; r++) {
    off[r] = r ? off[r - 1] + lens[r - 1] : 0;
    owner[r] = r;
    for (int q = 0; q < r; q++)
      if (lens[q] == lens[r] && !memcmp(texts + off[q], texts + off[r], lens[r])) {
        owner[r] = q;
        break;
      }
  }
  free(off);
  free(texts);
  free(lens);
  free(mine);
  if (rc) free(owner);
  else *owner_out = owner;
  return rc;
}

int ts__ckpt_dirs(ts_trainer *t) {
  ts_comm *w = ts_dist_world(t->dist);
  t->ckpt_writer = t->run->rank == 0;
  t->ckpt_copies = 0;
  if (!w || ts_comm_size(w) < 2) return TS_OK;
  const char *dir = t->cfg.checkpoint.dir[0] ? t->cfg.checkpoint.dir : ".";
  int *owner = NULL, rc = gather_paths(w, dir, &owner);
  if (rc) return ts_error_wrap(rc, "checkpoint.dir: comparing the ranks' directories");
  int N = ts_comm_size(w), other = -1;
  for (int r = 1; r < N; r++)
    if (owner[r] == r && other < 0) other = r;
  t->ckpt_writer = owner[t->run->rank] == t->run->rank;
  t->ckpt_copies = other > 0;
  free(owner);
  if (other > 0 && t->cfg.checkpoint.format == TS_CFG_CKPT_SLICED)
    return ts_error_set(TS_ECONFIG, "%s: checkpoint.dir differs between the ranks (rank %d's is not rank 0's): a sliced "
                        "checkpoint (checkpoint.format: sliced) is one directory every rank writes its pieces into; "
                        "give every rank the same checkpoint.dir, or checkpoint.format: whole (Python: "
                        "CheckpointConfig(integrated_save=True)) for a whole copy in each", 
                        t->cfg.source[0] ? t->cfg.source : "config", other);
  return TS_OK;
}

#define COPY_TAG 7301
#define COPY_CHUNK ((size_t)1 << 30)

int ts__ckpt_copy_out(ts_comm *w, const char *path, int rc0) {
  if (!w || ts_comm_size(w) < 2) return rc0;
  int N = ts_comm_size(w), rank = ts_comm_rank(w);
  char msg0[1200] = "";
  if (rc0) snprintf(msg0, sizeof msg0, "%s", ts_last_error());
  int32_t st0 = rc0;
  int rc = ts_comm_broadcast(w, &st0, 1, TS_I32, 0); /* rank 0's result */
  if (rc) return ts_error_wrap(rc, "checkpoint %s", path);
  if (st0) return rank == 0 ? ts_error_set(rc0, "%s", msg0)
                            : ts_error_set(st0, "checkpoint %s: not written (rank 0 reports why)", path);
  int *owner = NULL;
  if ((rc = gather_paths(w, path, &owner))) return ts_error_wrap(rc, "checkpoint %s", path);
  char *data = NULL;
  size_t len = 0;
  int lrc = TS_OK; /* this rank's own failure (reading on rank 0, writing on a copy's rank) */
  char lmsg[1200] = "";
  int copies = 0;
  for (int r = 1; r < N; r++) copies += owner[r] == r;
  if (rank == 0 && copies) lrc = ts__file_read_all(path, "checkpoint", &data, &len);
  for (int r = 1; r < N && !rc; r++) {
    if (owner[r] != r || (rank != 0 && rank != r)) continue;
    int64_t n = lrc ? -1 : (int64_t)len; /* -1: rank 0 cannot send it */
    if (rank == 0) rc = ts_comm_send(w, &n, 1, TS_I64, r, COPY_TAG);
    else rc = ts_comm_recv(w, &n, 1, TS_I64, 0, COPY_TAG);
    if (rc) break;
    if (n < 0) { /* rank 0 said why (its status below) */
      if (rank == r) lrc = ts_error_set(TS_EIO, "%s: rank 0 could not read its checkpoint to copy it here", path);
      continue;
    }
    if (rank != 0 && !(data = malloc(n ? (size_t)n : 1))) {
      rc = ts_error_set(TS_ENOMEM, "checkpoint %s: out of memory receiving %lld bytes", path, (long long)n);
      break;
    }
    for (size_t o = 0; !rc && o < (size_t)n; o += COPY_CHUNK) {
      size_t k = (size_t)n - o < COPY_CHUNK ? (size_t)n - o : COPY_CHUNK;
      rc = rank == 0 ? ts_comm_send(w, data + o, k, TS_U8, r, COPY_TAG) : ts_comm_recv(w, data + o, k, TS_U8, 0, COPY_TAG);
    }
    if (rank == r && !rc && !lrc) {
      ts__afile *f = NULL;
      lrc = ts__mkdir_parents(path);
      if (!lrc) lrc = ts__afile_open(path, &f);
      if (!lrc && (lrc = ts__afile_write(f, data, (size_t)n))) ts__afile_abort(f);
      else if (!lrc) lrc = ts__afile_commit(f);
    }
  }
  if (lrc) snprintf(lmsg, sizeof lmsg, "%s", ts_last_error());
  free(data);
  free(owner);
  if (rc) return ts_error_wrap(rc, "checkpoint %s: copying it to the ranks with their own path", path);
  int32_t *all = calloc((size_t)N, sizeof *all), mine = lrc;
  if (!all) return ts_error_set(TS_ENOMEM, "checkpoint: out of memory");
  rc = ts_comm_allgather(w, &mine, all, 1, TS_I32);
  int bad = -1;
  for (int r = 0; r < N && !rc; r++)
    if (all[r] && bad < 0) bad = r;
  free(all);
  if (rc) return ts_error_wrap(rc, "checkpoint %s: agreeing on the copies", path);
  if (lrc) return ts_error_set(lrc, "checkpoint: rank %d: %s", rank, lmsg);
  if (bad >= 0)
    return ts_error_set(TS_EIO, "checkpoint %s: rank %d could not write its copy (its message names the file)", path,
                        bad);
  return TS_OK;
}
