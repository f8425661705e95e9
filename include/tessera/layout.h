/* Tessera tensor layouts (MindSpore's device matrix + tensor map) and the redistribution planner.
 *
 * ---- A short tutorial ----
 *
 * Devices. The N ranks of a job are arranged as an N-d grid, the DEVICE MATRIX dev[0..nd-1]
 * (product = N). Rank r has one coordinate per axis, row-major, the LAST axis fastest (as
 * ts_comm_grid_coords in comm.h and MindSpore's device matrix): with dev (2,4), rank 6 is at
 * (1,2). The ranks that differ from r only along axis a form r's GROUP on axis a
 * (ts_comm_grid_axis in comm.h builds its communicator); its members are ordered by their
 * coordinate on a.
 *
 * Tensors. A TENSOR MAP says, for every dimension i of a tensor, which device axis cuts it:
 * tmap[i] = a (counted from the LEFT, 0 = dev[0]) or -1 (not cut). The rank whose coordinate on
 * axis a is c holds the contiguous block [c*n/d, (c+1)*n/d) of that dimension (n its size,
 * d = dev[a]; n % d must be 0). An axis cuts at most one dimension; along an axis that cuts
 * nothing the tensor is replicated. A PARTIAL mask adds "bit a: the values are partial sums over
 * axis a" (what a matmul contracting a cut dimension produces): the true tensor is the sum of the
 * rank's buffers over its group on axis a. An axis cannot both cut a dimension and be partial.
 *
 *   dev (2,4), map (1,-1), tensor 8x6:   rank 6 = (1,2) holds rows [4,6) and all 6 columns;
 *                                        ranks 2 = (0,2) and 6 hold the same piece (replicated
 *                                        along axis 0)
 *   dev (2,4), map (0,1), tensor 8x6:    6 columns cannot be cut in 4: TS_ESHAPE
 *   dev (2,4), map (-1,1) partial{0}, tensor 8x8: rank 6 holds columns [4,6) of every row; its
 *                                        values plus rank 2's are the true values
 *
 * MindSpore counts the axes of its tensor_map from the RIGHT (value k = axis nd-1-k);
 * ts_layout_tmap_from_mindspore / _to_mindspore convert, so strategy files can be exchanged.
 *
 * Redistribution. When a producer's layout differs from what its consumer needs, the parallel
 * pass converts it with collectives run on the groups of single device axes: ALLREDUCE (settle a
 * partial axis), REDUCE_SCATTER (settle it and cut a dimension with it), ALLGATHER (un-cut a
 * dimension), ALLTOALL (move an axis from one dimension to another) and the free local SLICE (cut
 * a dimension by an axis the tensor is replicated on). ts_redist_plan_make computes the ordered
 * list and its cost (bytes sent per rank, ring formulas); see docs/layout.md for the rules.
 *
 *   shape 8x16, f32, dev (2,4), map (0,-1) -> map (-1,1):
 *     1. SLICE dim 1 by axis 1        local 4x16 -> 4x4, free
 *     2. ALLGATHER dim 0 on axis 0    local 4x4 -> 8x4, sends (2-1)*64 = 64 bytes per rank
 *
 * Everything here is pure computation: no MPI, no allocation visible to the caller, nothing
 * printed. Fallible functions return TS_OK or a negative TS_E* code with a message
 * (ts_last_error()) that names the layout, the dimension or axis and the sizes at fault. */
#ifndef TESSERA_LAYOUT_H
#define TESSERA_LAYOUT_H

#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most axes a device matrix may have. */
#define TS_LAYOUT_MAX_AXES 8

typedef struct {
  int ndev;                    /* axes of the device matrix, 1..TS_LAYOUT_MAX_AXES */
  int dev[TS_LAYOUT_MAX_AXES]; /* the device matrix (each >= 1; product = number of devices) */
  int ndim;                    /* tensor dimensions, 0..TS_MAX_DIMS */
  int tmap[TS_MAX_DIMS];       /* device axis (from the left) cutting each dimension, or -1 */
  unsigned partial;            /* bit a set: the values are partial sums over device axis a */
} ts_layout;

/* ---- layouts ---- */

/* Fills *l (unused entries zeroed) from a device matrix dev[0..ndev-1], a tensor map
 * tmap[0..ndim-1] (tmap may be NULL when ndim is 0) and a partial mask, then validates it as
 * ts_layout_validate does. On failure *l is still filled and the status says why. */
int ts_layout_init(ts_layout *l, int ndev, const int *dev, int ndim, const int *tmap,
                   unsigned partial);
/* A layout replicated on every device (every tmap entry -1, no partial axis). */
int ts_layout_replicated(ts_layout *l, int ndev, const int *dev, int ndim);
/* Checks the structure (no shape involved): 1 <= ndev <= 8, every dev[a] >= 1 with a product
 * that fits in an int, 0 <= ndim <= TS_MAX_DIMS, every tmap entry in -1..ndev-1, no axis cutting
 * two dimensions, partial bits only on existing axes, none of them also cutting a dimension.
 * TS_EINVAL naming the entry at fault. */
int ts_layout_validate(const ts_layout *l);
/* Validates l and checks it fits `shape`: same number of dimensions and every cut dimension
 * divisible by its cut. TS_ESHAPE naming the dimension, its size, the cut and the axis. */
int ts_layout_check_shape(const ts_layout *l, const ts_shape *shape);
/* 1 if a and b are the same layout (device matrix, tensor map and partial mask), else 0. */
int ts_layout_equal(const ts_layout *a, const ts_layout *b);
/* Number of devices (product of the device matrix); 0 if the device matrix is invalid. */
int ts_layout_ndevices(const ts_layout *l);
/* Number of pieces dimension `dim` is cut into (dev[tmap[dim]], or 1); 0 if dim is invalid. */
int ts_layout_dim_cut(const ts_layout *l, int dim);
/* Coordinates of `rank` in l's device matrix (coords has l->ndev entries), last axis fastest.
 * TS_EINVAL if rank is outside 0..N-1. */
int ts_layout_rank_coords(const ts_layout *l, int rank, int *coords);
/* The ranks of `rank`'s group on device axis `axis`, ordered by their coordinate on that axis
 * (ranks has dev[axis] entries; ranks[c] is the member with coordinate c). */
int ts_layout_axis_group(const ts_layout *l, int rank, int axis, int *ranks);
/* Shape of every rank's local piece of a tensor of shape `global` (the same on every rank).
 * Errors as ts_layout_check_shape. */
int ts_layout_local_shape(const ts_layout *l, const ts_shape *global, ts_shape *local);
/* Global index, per dimension, of the first element `rank` holds (offsets has global->ndim
 * entries; 0 for dimensions that are not cut). Errors as ts_layout_check_shape, and TS_EINVAL
 * for a rank outside the device matrix. */
int ts_layout_offsets(const ts_layout *l, const ts_shape *global, int rank, int64_t *offsets);
/* Text form for messages: "dev(2,4) map(1,-1)" plus " partial{0}" (axes listed) when partial.
 * Always NUL-terminated; returns buf. */
char *ts_layout_str(const ts_layout *l, char *buf, size_t cap);

/* ---- MindSpore conventions ---- */

/* MindSpore's tensor_map counts device axes from the RIGHT: value k means axis ndev-1-k; -1 stays
 * -1. Converts ms[0..ndim-1] to Tessera's convention in tmap (which may alias ms). TS_EINVAL
 * naming the entry if a value is outside -1..ndev-1. */
int ts_layout_tmap_from_mindspore(int ndev, int ndim, const int *ms, int *tmap);
/* The inverse: Tessera's tmap to MindSpore's tensor_map (ms may alias tmap). */
int ts_layout_tmap_to_mindspore(int ndev, int ndim, const int *tmap, int *ms);

/* Common refinement of two device matrices with the same number of devices: the coarsest matrix
 * of which every axis of a and every axis of b is a run of consecutive axes (e.g. (4) and (2,2)
 * give (2,2); (2,4) and (4,2) give (2,2,2)). Axes of size 1 disappear. It exists when the
 * partial products of a and of b, merged, each divide the next; otherwise TS_EUNSUPPORTED
 * ((2,3) and (3,2)). TS_EINVAL if the device counts differ or a matrix is invalid; TS_ERANGE if
 * the refinement would have more than TS_LAYOUT_MAX_AXES axes. out has room for
 * TS_LAYOUT_MAX_AXES entries; *nout receives the count (1 with out[0] = 1 for a single device). */
int ts_layout_common_devmat(int na, const int *a, int nb, const int *b, int *nout, int *out);

/* ---- redistribution planning ---- */

typedef enum {
  TS_REDIST_SLICE = 0,          /* local: keep this rank's block of `dim` for axis slice_axis */
  TS_REDIST_REDUCE_SCATTER = 1, /* sum over the group, scatter along `dim` */
  TS_REDIST_ALLREDUCE = 2,      /* sum over the group */
  TS_REDIST_ALLTOALL = 3,       /* cut `dim` into group-size blocks, send block k to member k,
                                   concatenate the received blocks along `dim2` in member order */
  TS_REDIST_ALLGATHER = 4,      /* concatenate the members' buffers along `dim` in member order */
  TS_REDIST_KIND_COUNT
} ts_redist_kind;

/* Most ops a plan can hold (two per device axis). */
#define TS_REDIST_MAX_OPS (2 * TS_LAYOUT_MAX_AXES)

typedef struct {
  ts_redist_kind kind;
  int axis;       /* device axis whose groups run the collective; -1 for SLICE */
  int dim;        /* SLICE: the dim cut; REDUCE_SCATTER: the dim scattered; ALLGATHER: the dim
                     concatenated; ALLTOALL: the dim split and sent; ALLREDUCE: -1 */
  int dim2;       /* ALLTOALL: the dim received blocks are concatenated along (the dim the axis
                     leaves); -1 otherwise */
  int slice_axis; /* SLICE: the axis whose coordinate picks the block kept; -1 otherwise */
  int group;      /* ranks per group (dev[axis]; SLICE: dev[slice_axis]) */
  int64_t in_bytes;  /* per-rank bytes before the op */
  int64_t out_bytes; /* per-rank bytes after it */
  double cost;    /* bytes sent per rank: ring formulas with g = group, s = in_bytes:
                     ALLGATHER (g-1)*s, REDUCE_SCATTER (g-1)/g*s, ALLREDUCE 2(g-1)/g*s,
                     ALLTOALL (g-1)/g*s, SLICE 0 */
  ts_layout after; /* the layout once the op has run (on plan.shape) */
} ts_redist_op;

typedef struct {
  /* What the ops work on. With equal device matrices: the global shape and the two layouts as
   * given. Otherwise both layouts rewritten on a common refinement of the device matrices
   * (ts_layout_common_devmat, refined further where a dim needs it) and, where a dimension ends
   * up cut by several refined axes, that dimension split into sub-dimensions (outermost first)
   * so each is cut by at most one axis, as MindSpore expands the tensor shape. A rank's local
   * buffer is the same memory in either form (row-major reshape): reshape it to the local shape
   * of `from` before the first op and back from that of `to` after the last. Ranks keep their
   * numbers: refinement splits axes without reordering devices. */
  ts_shape shape;
  ts_layout from, to;
  ts_shape orig_shape; /* the global shape given */
  int nops;
  ts_redist_op ops[TS_REDIST_MAX_OPS];
  double total_cost; /* sum of ops[].cost */
} ts_redist_plan;

/* "slice", "reduce_scatter", "allreduce", "alltoall", "allgather" ("?" if invalid). */
const char *ts_redist_kind_name(ts_redist_kind k);

/* Plans the conversion of a tensor of global shape `shape` with elements of `elem_size` bytes
 * from layout `from` to layout `to`. The ops come from these moves, per device axis a:
 *  - partial in from, not in to: REDUCE_SCATTER along the dim `to` cuts with a (once that dim is
 *    free), else ALLREDUCE (then, if `to` cuts a dim with a, a SLICE);
 *  - cutting dim i in from, dim j != i in to: ALLTOALL (split j, concat i) once j is free, or
 *    ALLGATHER of i then SLICE of j;
 *  - cutting a dim in from, nothing in to: ALLGATHER along it;
 *  - cutting nothing in from, dim j in to: SLICE of j (free) once j is free.
 * Among all orders and choices the plan is the cheapest in total bytes sent per rank, then the
 * one with fewest ops, then the first in the order SLICE < REDUCE_SCATTER < ALLREDUCE < ALLTOALL
 * < ALLGATHER (then by axis) at each step. In practice: free slices first, then partial sums,
 * all-to-alls, all-gathers; REDUCE_SCATTER and ALLTOALL whenever their dim is free from the start
 * (they always win then); ALLGATHER + SLICE only where axes trade dims in a cycle or where it is
 * strictly cheaper (a dim held by an axis that must be gathered first). docs/layout.md has the
 * details. Equal layouts give an empty plan. The plan is deterministic.
 * Errors: TS_EINVAL for invalid layouts, different device counts or numbers of dims, elem_size 0,
 * or an axis partial in `to` but not in `from` (a partial tensor is made by compute, never by
 * redistribution); TS_ESHAPE if a layout does not fit the shape; TS_EUNSUPPORTED when the device
 * matrices have no common refinement or a dim cannot be expressed on one (messages name the
 * device matrices / the dim and the axes cutting it). On failure plan->nops is 0. */
int ts_redist_plan_make(const ts_shape *shape, size_t elem_size, const ts_layout *from,
                        const ts_layout *to, ts_redist_plan *plan);

/* One op as text: "alltoall axis 1 split dim 0 concat dim 1 (g=4, 256 B -> 256 B, cost 192)".
 * Returns buf. */
char *ts_redist_op_str(const ts_redist_op *op, char *buf, size_t cap);
/* The whole plan, one op per line after a header line naming from, to and the total. */
char *ts_redist_plan_str(const ts_redist_plan *plan, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
