/* Tessera regions: where a piece of a tensor sits in the whole tensor, and which elements two
 * pieces share. Pure arithmetic (no I/O, no MPI); sliced checkpoints (checkpoint.h) describe every
 * piece a rank writes with a region, and a rank loading one intersects the regions it needs with
 * the regions on disk.
 *
 * A region is a BOX of a tensor seen with shape `dims` (per dim an offset and an extent: what a
 * layout's cut holds, layout.h) and a RANGE [lo, hi) of that box's row-major order (what a ZeRO
 * part holds: the flat buffer is cut across parameters, so a part of a parameter is a range of its
 * elements, and of a rank's slice when the parameter is itself cut). A plain flat range of the
 * tensor is a range of the box that covers the whole tensor; a plain box has lo = 0 and hi = its
 * element count. A piece's data holds its elements in that order: the box row-major, from lo to hi.
 *
 * `dims` is the shape the box is expressed in; it may be a row-major reshape of the tensor's own
 * shape (the parallel pass cuts GPT's fused (3C, C) q|k|v weight as (3, C, C), by heads): every
 * position below is the element's row-major position in the tensor, which both shapes share, so
 * regions in different reshapes of one tensor intersect correctly.
 *
 *   ts_region a, b;
 *   ts_region_box(&a, &dims, (int64_t[]){0, 4}, (int64_t[]){8, 4});   // columns 4..7 of (8, 16)
 *   ts_region_range(&b, &dims, 20, 70);                                 // elements 20..69
 *   ts_region_intersect(&a, &b, copy, &ctx);    // copy(a_local, b_local, n, ctx) per common run
 *
 * Runs: a region is a sequence of maximal runs of consecutive positions, in increasing order
 * (ts_region_runs); intersecting two regions walks both run lists, skipping ahead with seeks, so
 * it costs about the runs of the smaller one. */
#ifndef TESSERA_REGION_H
#define TESSERA_REGION_H

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndim;                  /* 0: a scalar (one element) */
  int64_t dims[TS_MAX_DIMS]; /* the shape the box is expressed in */
  int64_t off[TS_MAX_DIMS];  /* the box's first index per dim */
  int64_t ext[TS_MAX_DIMS];  /* the box's size per dim */
  int64_t lo, hi;            /* elements [lo, hi) of the box's row-major order */
} ts_region;

/* The box off[d] .. off[d] + ext[d] of a tensor of shape dims, whole (lo 0, hi its elements).
 * TS_EINVAL (naming the dim, offset, extent and size) when the box leaves the tensor or a size
 * is negative. */
int ts_region_box(ts_region *r, const ts_shape *dims, const int64_t *off, const int64_t *ext);
/* The whole tensor of shape dims. */
int ts_region_whole(ts_region *r, const ts_shape *dims);
/* Positions [begin, end) of the tensor of shape dims (the whole box's range). TS_EINVAL outside. */
int ts_region_range(ts_region *r, const ts_shape *dims, int64_t begin, int64_t end);
/* Keeps elements [lo, hi) of r's own order (0 <= lo <= hi <= ts_region_numel(r)): r's range
 * becomes [r->lo + lo, r->lo + hi). TS_EINVAL otherwise. */
int ts_region_restrict(ts_region *r, int64_t lo, int64_t hi);
/* Checks a region read from a file: ndim in [0, TS_MAX_DIMS], sizes >= 0, the box inside the
 * tensor, 0 <= lo <= hi <= the box's elements. TS_EINVAL with a message saying which. */
int ts_region_check(const ts_region *r);
/* Elements of the region (hi - lo) and of the tensor it is in (the product of dims). */
int64_t ts_region_numel(const ts_region *r);
int64_t ts_region_space_numel(const ts_region *r);
/* The shape a piece with this region is stored as: the box's shape when the region is the whole
 * box, else one dim of hi - lo elements. */
ts_shape ts_region_local_shape(const ts_region *r);
/* 1 when the region is the whole tensor. */
int ts_region_is_whole(const ts_region *r);
/* 1 when a and b are the same region written the same way (dims, box and range). */
int ts_region_equal(const ts_region *a, const ts_region *b);
/* "(8,16)[0:8,4:8]" with " elements [lo, hi)" when only part of the box; "(8,16) whole". Always
 * NUL-terminated; returns buf. */
char *ts_region_str(const ts_region *r, char *buf, size_t cap);

/* The runs of a region, in increasing position. */
typedef struct {
  ts_region r;
  int k;                       /* dims k+1.. are whole: a run spans dim k's extent and them */
  int64_t run;                 /* elements of the box per run */
  int64_t nruns;
  int64_t next;                /* the next run's index */
  int64_t stride[TS_MAX_DIMS]; /* row-major strides of dims */
  int64_t w[TS_MAX_DIMS];      /* run-index weights of the outer dims 0..k-1 */
} ts_region_runs;

void ts_region_runs_init(ts_region_runs *it, const ts_region *r);
/* The next run: *pos its first element's position in the tensor, *local its offset in the
 * piece's data, *len its elements (> 0). Returns 0 when there are no more. */
int ts_region_runs_next(ts_region_runs *it, int64_t *pos, int64_t *local, int64_t *len);
/* Skips ahead (never back) so that the next run returned is the first one ending after position
 * pos. */
void ts_region_runs_seek(ts_region_runs *it, int64_t pos);

/* For each run of elements a and b share, in increasing position: fn(a_local, b_local, n, user)
 * with the run's offsets in a's and b's data. Returns the number of shared elements, or a
 * negative status: fn's (it stops at the first non-zero return), or TS_ESHAPE when a and b are
 * regions of tensors of different element counts. */
typedef int (*ts_region_fn)(int64_t a_local, int64_t b_local, int64_t n, void *user);
int64_t ts_region_intersect(const ts_region *a, const ts_region *b, ts_region_fn fn, void *user);

/* ---- pieces ----
 * A named piece of a tensor: what a sliced checkpoint stores and what a rank loads. */
typedef struct {
  char *name;       /* the tensor's name in a whole checkpoint ("param.fc1.weight",
                       "optim.exp_avg.fc1.weight", "optim.step") */
  ts_dtype dtype;
  ts_shape shape;   /* the whole tensor's shape (as a whole checkpoint stores it) */
  ts_region region; /* where the piece sits (the same element count as shape) */
  void *data;       /* its elements in the region's order; NULL when planning without memory */
  int owned;        /* data was copied into the list (ts_piece_list_add_copy) */
} ts_piece;

typedef struct {
  ts_piece *v;
  int n, cap;
} ts_piece_list;

/* Appends a piece (name copied; data not). TS_EINVAL when the region's elements differ from the
 * shape's, or the dtype is invalid; TS_ENOMEM. */
int ts_piece_list_add(ts_piece_list *l, const char *name, ts_dtype dt, const ts_shape *shape, const ts_region *r,
                      void *data);
/* The same with data copied into the list (its region's elements x the dtype's size), e.g. a
 * scalar, or a snapshot a background writer can own. */
int ts_piece_list_add_copy(ts_piece_list *l, const char *name, ts_dtype dt, const ts_shape *shape,
                           const ts_region *r, const void *data);
/* Index of the first piece named `name`, or -1. */
int ts_piece_list_find(const ts_piece_list *l, const char *name);
void ts_piece_list_free(ts_piece_list *l);
/* Bytes of a piece's data. */
size_t ts_piece_nbytes(const ts_piece *p);
/* A 64-bit hash of what a piece is (name, dtype, shape, region; not its data): equal pieces of
 * two ranks hash alike, so the ranks holding the same piece can be found from the hashes. */
uint64_t ts_piece_hash(const ts_piece *p);

#ifdef __cplusplus
}
#endif
#endif
