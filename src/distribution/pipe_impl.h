/* Internal: the pipeline layout's state (dist_pipe.c), shared with the file that runs it on GPU
 * ranks (dist_device_pipe.c). See dist_pipe.c's head. */
#ifndef TS_DIST_PIPE_IMPL_H
#define TS_DIST_PIPE_IMPL_H

#include "dist_impl.h"
#include "parallel/schedule.h"
#include "parallel/stage.h"
#include "semi.h"

/* the pipeline's p2p communicator: the slot after those of the pass inside the stages (or after
 * slot 0, SyncBatchNorm's, without), so the plans' tables stay as small as the job's groups */
#define PIPE_SLOT (PIPE(d)->slot)
#define MAX_CHUNKS 64

typedef struct {
  ts_stage_graph sg, se;  /* training and evaluation graphs of the piece */
  int K;                  /* plan instances */
  ts_plan **plan;
  ts_plan *plan_e;
  int *free_inst, nfree;
  int nbwd;               /* backwards run this step */
  int *inst_of;           /* micro-batch -> instance running it, -1 */
  size_t *roff, *rlen;    /* gradient ranges this piece writes */
  int nr;
  ts_val seed;            /* the CONST seeding the piece's backward (ts_dist_set_loss_scale) */
} pchunk;

/* The pipeline layout's private state (d->priv). */
struct ts__pipe {
  ts__semi pass;          /* semi_auto inside the stages: the pass over the whole model (semi.h) */
  int P, V, dp, stage, dpi, M;
  int semi, sub, j;       /* semi_auto inside the stages: each stage's `sub` ranks cut it by the
                             strategies (this rank is j of them); else data-parallel replicas */
  const ts_graph *cg, *cge; /* the graphs cut into pieces: the whole model's, or the pass's rank graphs */
  ts_params *cp;          /* their store */
  float *holders_w;       /* per rank-store entry: 1 / the ranks of a stage holding the same slice */
  ts_schedule *sched;
  int slot;               /* the p2p communicator's plan slot (PIPE_SLOT) */
  pchunk ch[MAX_CHUNKS];
  int *piece, *piece_e;   /* of the whole training / evaluation graph's nodes */
  int last_piece_e;       /* piece computing the logits */
  ts_comm *pp, *p2p, *dpc; /* pipeline group, its p2p copy, the stage's group (replicas, or its
                             semi_auto ranks) */
  int *owner;             /* per whole-store entry: the stage holding it first (checkpoints) */
  int *tied;              /* per rank-store entry: 1 if other stages hold it too */
  /* the parameters several stages hold, in whole-model order, the same list on every rank: their
   * rank-store entry (-1 on a rank without it) and their place in the buffer summed over the
   * pipeline (their slices have the same size on every stage holding them) */
  int ntied, *tied_local;
  size_t *tied_off, tied_total;
  int *count_once;        /* per rank-store entry: 1 if this rank counts it in the norm */
  float *logits;          /* an evaluation batch's (ts_dist_eval_forward) */
  size_t logits_n;
  int64_t p2p_bytes;      /* per micro-batch, forward activations sent by the rank */
  /* the last step: schedule wall time, compute (forward/backward ops minus receive waits),
   * receive waits (a plan hook times RECV nodes) */
  double wall_s, busy_s, wait_s, recv_t0;
  float semi_seed;
};

#define PIPE(d) ((struct ts__pipe *)(d)->priv)

/* A step's start: every piece's plan instances free, no micro-batch in flight (dist_pipe.c). */
void ts__pipe_begin(struct ts__pipe *pp);
/* Micro-batch mi's forward on piece ch: a free instance taken for it (*k); its backward: the
 * instance that ran its forward given back (*k; the backward runs on it next, nothing between).
 * TS_EINVAL naming the micro-batch when the schedule asks for what it cannot have. */
int ts__pipe_take(pchunk *ch, int mi, int *k);
int ts__pipe_give_back(pchunk *ch, int mi, int *k);
/* An evaluation batch's result (the rows' metrics in o->rows, or the logits in pp->logits),
 * computed by the stage holding the last piece, sent from it to the other stages (in place: the
 * result on every rank of the pipeline; *o->logits set). */
int ts__dist_pipe_send_eval(struct ts__pipe *pp, const ts__eval_out *o);

#endif
