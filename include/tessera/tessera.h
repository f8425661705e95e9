/* Tessera: deep-learning training in C, on one process or many.
 * Umbrella header: every public (installed) header (tests/tools/header_examples_test.sh checks that none is
 * missing); see each header for its contract. */
#ifndef TESSERA_H
#define TESSERA_H
#include "tessera/base.h"
#include "tessera/tensor.h"
#include "tessera/device.h"
#include "tessera/region.h"
#include "tessera/layout.h"
#include "tessera/ops.h"
#include "tessera/graph.h"
#include "tessera/params.h"
#include "tessera/runtime.h"
#include "tessera/comm.h"
#include "tessera/nn.h"
#include "tessera/strategy.h"
#include "tessera/cluster.h"
#include "tessera/model.h"
#include "tessera/autoparallel.h"
#include "tessera/optim.h"
#include "tessera/io.h"
#include "tessera/checkpoint.h"
#include "tessera/data.h"
#include "tessera/zoo.h"
#include "tessera/config.h"
#include "tessera/prof.h"
#include "tessera/plot.h"
#include "tessera/train.h"
#endif
