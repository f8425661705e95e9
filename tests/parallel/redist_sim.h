/* Test-only simulation of redistribution plans on simulated ranks (no MPI): every rank's local
 * buffer is a float array in one process; an op of a plan is applied across the groups of its
 * device axis exactly as the collective would, summing in member order.
 *
 * Deliberately independent of the library's slice arithmetic: coordinates, local shapes and
 * slices are recomputed here from the definitions (row-major device matrix, last axis fastest;
 * the rank with coordinate c on axis a holds block c of the dim that a cuts), so the tests
 * compare the planner against the definition, not against itself. */
#ifndef TS_REDIST_SIM_H
#define TS_REDIST_SIM_H

#include <stdlib.h>
#include <string.h>

#include "tessera/layout.h"

#define SIM_UNUSED __attribute__((unused))

/* Coordinates of rank r in the device matrix of l. */
SIM_UNUSED static void sim_coords(const ts_layout *l, int r, int *c) {
  for (int a = l->ndev - 1; a >= 0; a--) {
    c[a] = r % l->dev[a];
    r /= l->dev[a];
  }
}

SIM_UNUSED static int sim_ndev(const ts_layout *l) {
  int n = 1;
  for (int a = 0; a < l->ndev; a++) n *= l->dev[a];
  return n;
}

/* Local shape of l on global shape g (no validation: callers use valid layouts). */
SIM_UNUSED static ts_shape sim_local(const ts_layout *l, const ts_shape *g) {
  ts_shape s = *g;
  for (int i = 0; i < g->ndim; i++)
    if (l->tmap[i] >= 0) s.dims[i] /= l->dev[l->tmap[i]];
  return s;
}

/* The members of r's group on axis a, by coordinate. */
SIM_UNUSED static void sim_group(const ts_layout *l, int r, int a, int *members) {
  int c[TS_LAYOUT_MAX_AXES];
  sim_coords(l, r, c);
  for (int k = 0; k < l->dev[a]; k++) {
    c[a] = k;
    int q = 0;
    for (int x = 0; x < l->ndev; x++) q = q * l->dev[x] + c[x];
    members[k] = q;
  }
}

/* src has shape s; dst receives block c (of g) along dim d. */
SIM_UNUSED static void sim_extract(const float *src, const ts_shape *s, int d, int g, int c,
                                   float *dst) {
  int64_t outer = 1, inner = 1, n = s->dims[d], m = n / g;
  for (int i = 0; i < d; i++) outer *= s->dims[i];
  for (int i = d + 1; i < s->ndim; i++) inner *= s->dims[i];
  for (int64_t o = 0; o < outer; o++)
    memcpy(dst + o * m * inner, src + (o * n + (int64_t)c * m) * inner,
           (size_t)(m * inner) * sizeof(float));
}

/* dst has shape s (dim d of size g*m); src (dim d of size m) goes to block k along d. */
SIM_UNUSED static void sim_place(float *dst, const ts_shape *s, int d, int g, int k,
                                 const float *src) {
  int64_t outer = 1, inner = 1, n = s->dims[d], m = n / g;
  for (int i = 0; i < d; i++) outer *= s->dims[i];
  for (int i = d + 1; i < s->ndim; i++) inner *= s->dims[i];
  for (int64_t o = 0; o < outer; o++)
    memcpy(dst + (o * n + (int64_t)k * m) * inner, src + o * m * inner,
           (size_t)(m * inner) * sizeof(float));
}

/* Rank r's piece of the global tensor `glob` (shape g) under l, ignoring l's partial mask. */
SIM_UNUSED static void sim_slice(const ts_layout *l, const ts_shape *g, const float *glob, int r,
                                 float *out) {
  int c[TS_LAYOUT_MAX_AXES];
  sim_coords(l, r, c);
  ts_shape ls = sim_local(l, g);
  int64_t n = 1;
  for (int i = 0; i < ls.ndim; i++) n *= ls.dims[i];
  for (int64_t e = 0; e < n; e++) {
    int64_t rem = e, gi = 0, idx[TS_MAX_DIMS];
    for (int i = ls.ndim - 1; i >= 0; i--) {
      idx[i] = rem % ls.dims[i];
      rem /= ls.dims[i];
    }
    for (int i = 0; i < g->ndim; i++) {
      int a = l->tmap[i];
      int64_t off = a >= 0 ? c[a] * ls.dims[i] : 0;
      gi = gi * g->dims[i] + off + idx[i];
    }
    out[e] = glob[gi];
  }
}

/* The local shape an op produces from local shape `in` (computed from the op's definition). */
SIM_UNUSED static ts_shape sim_out_shape(const ts_redist_op *op, ts_shape in) {
  switch (op->kind) {
    case TS_REDIST_SLICE:
    case TS_REDIST_REDUCE_SCATTER: in.dims[op->dim] /= op->group; break;
    case TS_REDIST_ALLGATHER: in.dims[op->dim] *= op->group; break;
    case TS_REDIST_ALLTOALL:
      in.dims[op->dim] /= op->group;
      in.dims[op->dim2] *= op->group;
      break;
    default: break;
  }
  return in;
}

/* Applies op to every rank: in[r] has local shape `ls` under layout `before` (whose device
 * matrix defines the groups); out[r] (allocated by the caller, numel of sim_out_shape) receives
 * the result. Returns 0, or -1 if the op is malformed for this layout (bad axis/dim/group). */
SIM_UNUSED static int sim_apply(const ts_layout *before, const ts_shape *ls,
                                const ts_redist_op *op, float *const *in, float **out) {
  int P = sim_ndev(before);
  int ax = op->kind == TS_REDIST_SLICE ? op->slice_axis : op->axis;
  if (ax < 0 || ax >= before->ndev || op->group != before->dev[ax]) return -1;
  int g = op->group;
  if (g > 64) return -1;
  if (op->kind != TS_REDIST_ALLREDUCE && (op->dim < 0 || op->dim >= ls->ndim)) return -1;
  if (op->kind == TS_REDIST_ALLTOALL && (op->dim2 < 0 || op->dim2 >= ls->ndim || op->dim2 == op->dim))
    return -1;
  if ((op->kind == TS_REDIST_SLICE || op->kind == TS_REDIST_REDUCE_SCATTER ||
       op->kind == TS_REDIST_ALLTOALL) && ls->dims[op->dim] % g)
    return -1;
  int64_t n = 1;
  for (int i = 0; i < ls->ndim; i++) n *= ls->dims[i];
  ts_shape os = sim_out_shape(op, *ls);
  float *tmp = malloc((size_t)(n ? n : 1) * sizeof(float));
  int members[64];
  int c[TS_LAYOUT_MAX_AXES];
  if (!tmp) abort();
  for (int r = 0; r < P; r++) {
    sim_group(before, r, ax, members);
    sim_coords(before, r, c);
    switch (op->kind) {
      case TS_REDIST_SLICE: sim_extract(in[r], ls, op->dim, g, c[ax], out[r]); break;
      case TS_REDIST_ALLREDUCE:
      case TS_REDIST_REDUCE_SCATTER:
        for (int64_t e = 0; e < n; e++) {
          float s = 0;
          for (int k = 0; k < g; k++) s += in[members[k]][e];
          tmp[e] = s;
        }
        if (op->kind == TS_REDIST_ALLREDUCE) memcpy(out[r], tmp, (size_t)n * sizeof(float));
        else sim_extract(tmp, ls, op->dim, g, c[ax], out[r]);
        break;
      case TS_REDIST_ALLGATHER:
        for (int k = 0; k < g; k++) sim_place(out[r], &os, op->dim, g, k, in[members[k]]);
        break;
      case TS_REDIST_ALLTOALL:
        for (int k = 0; k < g; k++) {
          /* member k sends us block c (ours) of its split dim; it lands at block k of dim2 */
          sim_extract(in[members[k]], ls, op->dim, g, c[ax], tmp);
          sim_place(out[r], &os, op->dim2, g, k, tmp);
        }
        break;
      default: free(tmp); return -1;
    }
  }
  free(tmp);
  return 0;
}

#endif
