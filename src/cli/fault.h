/* Fault injection for the tests of restarts (`tessera launch --restarts`): the environment
 * variable TESSERA_FAULT describes faults that `tessera train` causes itself, through a trainer
 * callback registered by the CLI (the library knows nothing of them):
 *
 *   TESSERA_FAULT="rank:2,step:5,kind:kill"                  rank 2 raises SIGKILL after step 5
 *   TESSERA_FAULT="rank:1,step:3,kind:hang"                  rank 1 stops answering after step 3
 *   TESSERA_FAULT="rank:0,step:2,kind:slow,secs:0.5"         rank 0 sleeps 0.5 s after every step from 2 on
 *   TESSERA_FAULT="rank:0,step:4,kind:corrupt_ckpt;rank:3,step:6,kind:kill"
 *
 * Entries are separated by ';', fields by ',', each field key:value in any order: rank (a world
 * rank), step (>= 1: the optimizer step whose end fires it), kind, and for slow secs (seconds,
 * default 1). Kinds: kill = raise(SIGKILL) at the end of step S (after its update, before its
 * evaluation and checkpoint); hang = sleep forever there (the others' parallel.comm_timeout
 * catches it); slow = sleep secs at the end of every step from S on (a straggler); corrupt_ckpt =
 * flip 16 bytes in the middle of the data section of the checkpoint of step S (its CRC-32 no longer
 * matches), done at the end of step S + 1, when rank 0 has written it.
 *
 * Faults fire only in the first attempt of a job: when TESSERA_RESTART (set by `tessera launch`
 * to the restart number) is unset, empty or 0; restarts then run clean. */
#ifndef TS_CLI_FAULT_H
#define TS_CLI_FAULT_H

#include <stdint.h>

#include "tessera/train.h"

enum { TS__FAULT_KILL, TS__FAULT_HANG, TS__FAULT_SLOW, TS__FAULT_CORRUPT_CKPT };
#define TS__FAULT_MAX 16

typedef struct {
  int rank;
  int64_t step;
  int kind;
  double secs; /* slow */
} ts__fault;

typedef struct {
  ts__fault f[TS__FAULT_MAX];
  int n;
  int armed;        /* the first attempt: the faults fire */
  int rank;         /* this process's rank */
  char dir[1024];   /* checkpoint.dir and prefix, for corrupt_ckpt */
  char prefix[256];
} ts__faults;

/* Parses `spec` (TESSERA_FAULT's value; NULL or "" = no faults) into *out, armed from
 * TESSERA_RESTART. TS_ECONFIG with a one-line message naming TESSERA_FAULT, the entry and the bad
 * field. */
int ts__faults_parse(const char *spec, ts__faults *out);

/* Checks the faults against the job (a rank it has, a step it reaches, for corrupt_ckpt a
 * checkpoint written at step S before the last step) and registers the callback that fires them
 * on this rank (nothing when none is armed). `fs` must outlive the trainer. TS_ECONFIG naming
 * TESSERA_FAULT when a fault could never fire. */
int ts__faults_install(ts__faults *fs, ts_trainer *t, const ts_config *cfg);

#endif
