#!/bin/sh
# Writes a minimal tree for scripts/check_layers.sh into DIR: a layer table of three layers
# (base < graph < nn), a public header each, and sources whose includes point down the table.
# With "violate", src/base/rng.c also includes tessera/graph.h (base may not include graph) and
# src/nn/layers.c includes ../graph/graph_impl.h (an internal header of another layer).
# Usage: layers_fixture.sh DIR [violate]
set -eu
d=$1
mkdir -p "$d/docs" "$d/src/base" "$d/src/graph" "$d/src/nn" "$d/include/tessera"
cat > "$d/docs/architecture.md" <<'MD'
# fixture

| layer | folder | owns | may include |
|---|---|---|---|
| base | src/base | base.h | |
| graph | src/graph | graph.h | base |
| nn | src/nn | nn.h | graph base |

text after the table
MD
printf '#include <stddef.h>\n' > "$d/include/tessera/base.h"
printf '#include "tessera/base.h"\n' > "$d/include/tessera/graph.h"
printf '#include "tessera/graph.h"\n#include "base.h"\n' > "$d/include/tessera/nn.h"
printf '#include <string.h>\n#include "tessera/base.h"\n#include "rng.h"\n' > "$d/src/base/rng.c"
printf '#pragma once\n' > "$d/src/base/rng.h"
printf '#include "tessera/base.h"\n' > "$d/src/graph/graph_impl.h"
printf '#include "graph_impl.h"\n#include "tessera/graph.h"\n#include "../base/rng.h"\n' > "$d/src/graph/graph.c"
printf '#include "tessera/nn.h"\n#include "tessera/graph.h"\n' > "$d/src/nn/layers.c"
if [ "${2:-}" = violate ]; then
  printf '#include "tessera/graph.h"\n' >> "$d/src/base/rng.c"
  printf '#include "../graph/graph_impl.h"\n' >> "$d/src/nn/layers.c"
fi
