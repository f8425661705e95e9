#!/bin/sh
# Writes a minimal tree for scripts/check_layers.sh into DIR: a layer table of three layers
# (base < graph < nn), a public header each, graph's internal header graph_ir.h, one allow-list
# row (nn's layers.c may include graph's private graph_impl.h), and sources whose includes point
# down the table. With "violate": src/base/rng.c also includes tessera/graph.h (base may not
# include graph); src/nn/init.c includes ../graph/graph_impl.h (a private header, not on the
# allow-list); the public nn.h includes graph/graph_ir.h (an internal header in a public one);
# include/tessera/extra.h is owned by no layer; and the allow-list gets a row no include uses.
# Usage: layers_fixture.sh DIR [violate]
set -eu
d=$1
mkdir -p "$d/docs" "$d/src/base" "$d/src/graph" "$d/src/nn" "$d/include/tessera"
stale=""
[ "${2:-}" = violate ] && stale='| src/nn/gone.c | graph/graph_impl.h | a file that no longer exists |'
cat > "$d/docs/architecture.md" <<MD
# fixture

| layer | folder | public headers | internal headers | may include |
|---|---|---|---|---|
| base | src/base | base.h | rng.h | |
| graph | src/graph | graph.h | graph_ir.h | base |
| nn | src/nn | nn.h | | graph base |

text between the tables

| file | may include | why |
|---|---|---|
| src/nn/layers.c | graph/graph_impl.h | the fixture's allowed private include |
$stale

text after the tables
MD
printf '#include <stddef.h>\n' > "$d/include/tessera/base.h"
printf '#include "tessera/base.h"\n' > "$d/include/tessera/graph.h"
printf '#include "tessera/graph.h"\n#include "base.h"\n' > "$d/include/tessera/nn.h"
printf '#include <string.h>\n#include "tessera/base.h"\n#include "rng.h"\n' > "$d/src/base/rng.c"
printf '#pragma once\n' > "$d/src/base/rng.h"
printf '#include "tessera/base.h"\n' > "$d/src/graph/graph_impl.h"
printf '#include "tessera/graph.h"\n' > "$d/src/graph/graph_ir.h"
printf '#include "graph_impl.h"\n#include "tessera/graph.h"\n#include "../base/rng.h"\n' > "$d/src/graph/graph.c"
printf '#include "tessera/nn.h"\n#include "tessera/graph.h"\n#include "graph/graph_ir.h"\n#include "../graph/graph_impl.h"\n' > "$d/src/nn/layers.c"
printf '#include "tessera/nn.h"\n' > "$d/src/nn/init.c"
if [ "${2:-}" = violate ]; then
  printf '#include "tessera/graph.h"\n' >> "$d/src/base/rng.c"
  printf '#include "../graph/graph_impl.h"\n' >> "$d/src/nn/init.c"
  printf '#include "graph/graph_ir.h"\n' >> "$d/include/tessera/nn.h"
  printf '#include "tessera/base.h"\n' > "$d/include/tessera/extra.h"
fi
