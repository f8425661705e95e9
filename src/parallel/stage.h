/* Tessera pipeline stage cuts: a pure graph rewrite (no MPI, no tensors).
 *
 * The whole model's forward graph (with its loss, or its logits for evaluation) is cut into
 * `npieces` pieces in node order: every node gets a piece, and a value may only flow to the same
 * or a later piece. Piece k's graph holds k's nodes; each value it reads from an earlier piece
 * comes from a RECV, each value a later piece reads leaves through a SEND (graph.h, ts_send /
 * ts_recv), so autodiff of the piece's objective (the model's loss where it lives, plus the send
 * tokens) yields the piece's backward, receiving the gradients of what it sent and sending back
 * those of what it received (ts_stage_finish_backward). Parameters are registered in the piece's
 * own store with the whole model's names, shapes and initialisers, so every piece starts from the
 * single process's weights; a parameter two pieces read (tied embeddings) is in both stores.
 *
 *   int *piece = malloc(sizeof(int) * ts_graph_num_nodes(whole));
 *   ts_stage_assign(whole, P, rules, nrules, piece);           // or nrules = 0: balanced
 *   ts_stage_p2p net = {slot, P, tag_base};
 *   ts_stage_graph sg;  ts_stage_build(whole, wp, piece, P, k, &net, loss, &sg);
 *   ts_graph_backward(sg.g, sg.objective, seed);  ts_stage_finish_backward(&sg, &net);
 */
#ifndef TS_PARALLEL_STAGE_H
#define TS_PARALLEL_STAGE_H

#include "tessera/graph.h"
#include "tessera/params.h"
#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif


/* parallel.stages: nodes whose name matches `pattern` (the strategy patterns' syntax:
 * "transformer.h.*" or a prefix of dot-parts) go to piece `piece`. */
typedef struct {
  const char *pattern;
  int piece;
} ts_stage_rule;

/* Assigns every node of the forward graph g to a piece 0..npieces-1 (piece[node]). With rules:
 * matched nodes take their rule's piece (a node two rules give different pieces is an error
 * naming both); the others follow their inputs (the latest piece among them), or, reading only
 * leaves, their first consumer. Without rules: a balanced cut by cost (FLOPs plus memory
 * traffic), placed only where the fewest activations cross (between the blocks of a sequential
 * model). Errors (TS_ECONFIG, naming the key parallel.stages / parallel.pipeline_stages): a piece
 * left empty, a value flowing to an earlier piece, more pieces than cut points. */
int ts_stage_assign(const ts_graph *g, int npieces, const ts_stage_rule *rules, int nrules, int *piece);
/* Assigns the nodes of g (another graph of the same model, e.g. evaluation) like those of the
 * same name in ref (ref_piece); nodes without a namesake follow their inputs. TS_ECONFIG when the
 * result would send a value backwards. */
int ts_stage_assign_like(const ts_graph *ref, const int *ref_piece, const ts_graph *g, int npieces, int *piece);
/* Total cost of each piece (npieces entries) as ts_stage_assign balances it. */
void ts_stage_costs(const ts_graph *g, const int *piece, int npieces, double *cost);
/* The cut piece[] of g (npieces pieces) as parallel.stages rules: for each node the shortest
 * dot-part prefix of its operator name under which every node sits on one piece, each prefix
 * once, in node order (op: the prefix, text: the piece in decimal), checked to rebuild exactly
 * this cut through ts_stage_assign. *rules malloc'ed (free), *nrules of them; none for one piece.
 * TS_ECONFIG when no rules can (two operators of one name on different pieces). */
int ts_stage_rules_of(const ts_graph *g, const int *piece, int npieces, ts_op_text **rules, int *nrules);

/* Where pieces live: piece k on rank k % stages of the pipeline communicator in plan slot
 * `slot`; message tags are tag_base + 2 * edge (+1 for its gradient). */
typedef struct {
  int slot;
  int stages;
  int tag_base;
} ts_stage_p2p;

/* One cut edge: value `value` of the whole graph, from piece `from` to piece `to`. */
typedef struct {
  int value, from, to;
  int64_t bytes;
  int grad; /* its gradient travels back */
} ts_stage_edge;

/* A piece's graph. */
typedef struct {
  ts_graph *g;          /* owned by the caller after ts_stage_build (ts_graph_free) */
  ts_params *params;    /* the store its parameters are in (the caller's, or a new one it owns) */
  int piece;
  ts_val objective;     /* scalar: what backward differentiates (TS_NONE for evaluation) */
  ts_val out;           /* the whole graph's `out` value if this piece computes it, else TS_NONE */
  ts_val x, y;          /* the whole graph's inputs "x"/"y" if the piece reads them, else TS_NONE */
  int nfwd;             /* forward nodes (0..nfwd-1); set by ts_stage_build */
  int nrecv, nsend;     /* cut edges into and out of the piece (any number) */
  /* the lists below are malloc'd by ts_stage_build (ts_stage_graph_release frees them) */
  ts_val *recv;         /* nrecv each */
  int *recv_edge;       /* index into ts_stage_edges' list */
  int *recv_from, *recv_grad;
  ts_val *tokens;       /* sends the plan must keep (forward of evaluation, and the gradients
                           sent back): up to nsend + nrecv */
  int ntokens;
  int64_t send_bytes, recv_bytes; /* per run, forward activations (gradients: the same back) */
} ts_stage_graph;

/* Frees the lists of sg (recv*, tokens) and clears them; not sg->g nor sg->params (the caller's).
 * Safe on a zeroed or released sg. */
void ts_stage_graph_release(ts_stage_graph *sg);

/* The cut edges of an assignment, in the order that numbers their tags (*out malloc'd). */
int ts_stage_edges(const ts_graph *g, const int *piece, ts_stage_edge **out, int *nedges);
/* Builds piece k's graph from the forward graph `whole` (store wp) cut by `piece`, with `out`
 * the value whose piece computes it (the loss for training, the logits for evaluation). With
 * training, the objective is the loss (in its piece) plus the send tokens. The piece's parameters
 * are registered in `store` (found by name if already there: a rank's pieces and its evaluation
 * graphs share one store, not yet allocated), or in a new store when it is NULL. */
int ts_stage_build(const ts_graph *whole, const ts_params *wp, const int *piece, int k, const ts_stage_p2p *net,
                   ts_val out, int training, ts_params *store, ts_stage_graph *sg);
/* After ts_graph_backward(sg->g, sg->objective, ...): sends the gradient of every received value
 * that carries one back to its producer (zeros where backward gave none) and lists the send
 * tokens in sg->tokens for the plan to keep. */
int ts_stage_finish_backward(ts_stage_graph *sg, const ts_stage_p2p *net);

#ifdef __cplusplus
}
#endif
#endif
