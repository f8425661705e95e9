/* Tessera: deep-learning training in C, on one process or many.
 * Umbrella header; see each header for its contract. */
#ifndef TESSERA_H
#define TESSERA_H
#include "tessera/base.h"
#include "tessera/tensor.h"
#include "tessera/graph.h"
#include "tessera/runtime.h"
#include "tessera/nn.h"
#include "tessera/dist.h"
#include "tessera/comm.h"
#include "tessera/layout.h"
#include "tessera/parallel.h"
#include "tessera/strategy.h"
#include "tessera/sharding.h"
#endif
