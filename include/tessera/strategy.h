/* Tessera operator shard strategies (MindSpore's `shard`), and the sharding rules that turn an
 * operator's strategy into its inputs' and output's tensor layouts.
 *
 * A STRATEGY for an operator with k tensor inputs gives, for each input, how many parts each of
 * its dimensions is cut into, as MindSpore writes it: MatMul.shard(((2, 1), (1, 4))) cuts a's
 * rows in 2 and b's columns in 4. Cuts are >= 1; the product of an input's cuts must divide the
 * device count (the rest of the devices hold repeated copies: data parallel over them). Inputs
 * that are not tensors (attributes) have no entry.
 *
 * The layouts follow from the strategy and the op's sharding rule (include/tessera/layout.h for
 * device matrices and tensor maps). */
#ifndef TESSERA_STRATEGY_H
#define TESSERA_STRATEGY_H

#include "tessera/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An operator name or pattern with a text value: parallel.strategies' shard strategy, or
 * parallel.stages' stage number in decimal (config.h's lists hold these: ts_cfg_strategy). */
typedef struct {
  char op[160];
  char text[96];
} ts_op_text;

/* Most tensor inputs an operator strategy describes. */
#define TS_STRATEGY_MAX_INPUTS 8

typedef struct {
  int ninputs;                                    /* tensor inputs described, 0..TS_STRATEGY_MAX_INPUTS */
  int ndim[TS_STRATEGY_MAX_INPUTS];               /* dimensions of each input */
  int64_t cuts[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS]; /* parts each dimension is cut into (>= 1) */
} ts_op_strategy;

/* ---- operator strategies as text (src/parallel/strategy.c) ---- */

/* Parses a strategy as users write it, MindSpore's tuple of tuples: "((2,1),(1,4))". Spaces are
 * allowed anywhere; a trailing comma inside a tuple is accepted ("((4,),)"), "()" is an input
 * with no dimensions. Only the syntax and the limits (TS_STRATEGY_MAX_INPUTS inputs, TS_MAX_DIMS
 * dims, values that are integers of at most 18 digits) are checked here: a cut of 0 parses and is
 * refused by ts_op_strategy_validate. TS_EINVAL naming the column (1-based) and what was expected;
 * *out is all zero after a failure. */
int ts_op_strategy_parse(const char *text, ts_op_strategy *out);
/* Text form, Python tuple syntax that ts_op_strategy_parse reads back: "((2,1),(1,4))",
 * "((4,),)" for one input of one dim. Always NUL-terminated; returns buf. */
char *ts_op_strategy_str(const ts_op_strategy *st, char *buf, size_t cap);
/* 1 if a and b describe the same inputs with the same cuts, else 0. */
int ts_op_strategy_equal(const ts_op_strategy *a, const ts_op_strategy *b);

/* ---- validation (independent of what the op computes) ---- */

/* Checks `st` for operator `op` (a name used only in messages) on `ndevices` devices: 0 <=
 * ninputs <= TS_STRATEGY_MAX_INPUTS and 0 <= ndim <= TS_MAX_DIMS (TS_EINVAL), every cut >= 1
 * (TS_EINVAL naming op, input, dim and value), and each input's product of cuts divides
 * ndevices (TS_EINVAL naming op, input index, the product and the device count). */
int ts_op_strategy_validate(const char *op, const ts_op_strategy *st, int ndevices);
/* Checks `st` against the shapes of the op's tensor inputs (shapes[0..nshapes-1]): as many
 * shapes as inputs and the same number of dims (TS_ESHAPE), and every dimension divisible by its
 * cut (TS_ESHAPE naming op, input, dim, size and cut). */
int ts_op_strategy_check_shapes(const char *op, const ts_op_strategy *st, int nshapes,
                                const ts_shape *shapes);

/* ---- strategy sets: the strategies of a whole graph (MindSpore's strategy checkpoint) ---- */

/* A map from operator name (a graph node name such as "blocks.0.mlp.fc1", or an op scope) to
 * its ts_op_strategy, plus the layouts of parameters (name -> ts_layout and global shape) that
 * the parallel pass records, for one device count and pipeline stage. Names containing '*' are
 * RULES: '*' matches any run of characters other than '.', so "blocks.*.mlp.fc1" covers
 * "blocks.0.mlp.fc1" and "blocks.11.mlp.fc1" (not "blocks.0.x.mlp.fc1"). */
typedef struct ts_strategy_set ts_strategy_set;

/* One use of a parameter by an operator: parameter `param` is tensor input `input` of `op`. */
typedef struct {
  const char *op;
  int input;
  const char *param;
} ts_param_use;

/* Creates an empty set for `device_num` >= 1 devices and pipeline stage `stage` >= 0
 * (TS_EINVAL otherwise). */
int ts_strategy_set_create(int device_num, int stage, ts_strategy_set **out);
/* Frees the set and everything in it; NULL is fine. */
void ts_strategy_set_free(ts_strategy_set *s);
int ts_strategy_set_device_num(const ts_strategy_set *s);
int ts_strategy_set_stage(const ts_strategy_set *s);
/* Records (or replaces) the strategy of `op` (an exact name or a '*' rule), after checking it
 * with ts_op_strategy_validate against the set's device count. */
int ts_strategy_set_put(ts_strategy_set *s, const char *op, const ts_op_strategy *st);
/* Parses `text` (ts_op_strategy_parse) and records it for `op`; errors are prefixed with op. */
int ts_strategy_set_put_text(ts_strategy_set *s, const char *op, const char *text);
/* The strategy for `op`: its exact entry if there is one, else the matching rule with the most
 * literal characters (the first recorded among equals). TS_ENOTFOUND naming op if none. */
int ts_strategy_set_get(const ts_strategy_set *s, const char *op, ts_op_strategy *out);
/* Removes the entry named exactly `op` (rules by their text); TS_ENOTFOUND if absent. */
int ts_strategy_set_remove(ts_strategy_set *s, const char *op);
/* Entries (exact names and rules) in the order first recorded: count, then name / strategy of
 * entry i (NULL outside 0..count-1). */
int ts_strategy_set_count(const ts_strategy_set *s);
const char *ts_strategy_set_name(const ts_strategy_set *s, int i);
const ts_op_strategy *ts_strategy_set_at(const ts_strategy_set *s, int i);

/* Records (or replaces) the layout of parameter `param` of global shape `shape`: the layout must
 * be valid (ts_layout_validate), use the set's device count and fit the shape
 * (ts_layout_check_shape). */
int ts_strategy_set_put_layout(ts_strategy_set *s, const char *param, const ts_layout *l,
                               const ts_shape *shape);
/* The layout and shape of `param` (either output may be NULL); TS_ENOTFOUND naming it. */
int ts_strategy_set_get_layout(const ts_strategy_set *s, const char *param, ts_layout *l,
                               ts_shape *shape);
/* Parameter layouts in the order first recorded: count, then entry i (any output may be NULL;
 * TS_EINVAL outside 0..count-1). */
int ts_strategy_set_layout_count(const ts_strategy_set *s);
int ts_strategy_set_layout_at(const ts_strategy_set *s, int i, const char **param, ts_layout *l,
                              ts_shape *shape);
/* 1 if a and b hold the same device count, stage, strategies and layouts (order ignored). */
int ts_strategy_set_equal(const ts_strategy_set *a, const ts_strategy_set *b);

/* Checks that every parameter used by several ops (uses[0..n-1]) is cut the same way by each:
 * the cuts of input `input` in the strategies of the ops (ts_strategy_set_get) must be equal.
 * TS_EINVAL naming the parameter, both ops and both cut tuples; TS_ENOTFOUND naming the op and
 * the parameter if an op has no strategy; TS_EINVAL if `input` is not one of the op's inputs. */
int ts_strategy_check_shared(const ts_strategy_set *s, int n, const ts_param_use *uses);

/* ---- strategy files (MindSpore's strategy_ckpt_save_file / strategy_ckpt_load_file) ----
 * JSON, described in docs/layout.md ("Strategies and strategy files"):
 *   {"version": 1, "device_num": 8, "stage": 0,
 *    "strategies": {"<op>": {"inputs": [[2,1],[1,4]]}, ...},
 *    "layouts": {"<param>": {"dev_matrix": [2,4], "tensor_map": [1,-1], "partial": [],
 *                            "shape": [8,16]}, ...}}
 * tensor_map and partial count device axes from the RIGHT, as MindSpore's tensor_map does. */

/* Writes the set atomically: a temporary file next to `path`, fsync, rename. On failure
 * (TS_EIO naming the path and the reason) nothing is left behind and an existing file at
 * `path` is unchanged. The directory must exist. */
int ts_strategy_set_save(const ts_strategy_set *s, const char *path);
/* Reads a strategy file. Every value is checked (types, ranges, cuts dividing device_num,
 * layouts fitting their shapes): TS_EFORMAT / TS_EINVAL / TS_ESHAPE with
 * "<file>: strategies.<op>.inputs[1][0]: expected a positive integer, got -1"-style messages,
 * TS_EFORMAT with line and column for malformed JSON, TS_EUNSUPPORTED for another version,
 * TS_ENOTFOUND if the file cannot be opened. `device_num` > 0 must equal the file's
 * (TS_ECONFIG naming both); 0 accepts the file's. */
int ts_strategy_set_load(const char *path, int device_num, ts_strategy_set **out);

#ifdef __cplusplus
}
#endif

#endif
