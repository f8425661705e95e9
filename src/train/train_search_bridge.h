/* Transitional: the trainer's internals the auto_parallel search (moved to src/autoparallel/)
 * still reads until it takes its own inputs (removed by the next commit). */
#ifndef TS_TRAIN_SEARCH_BRIDGE_H
#define TS_TRAIN_SEARCH_BRIDGE_H
#include "train_impl.h"
#endif
