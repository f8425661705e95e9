#!/bin/sh
# Include-direction check: the layer table in ROOT/docs/architecture.md (columns: layer, folder,
# public headers it owns, layers it may include) is the input. Every #include "..." in
# ROOT/src/<layer>/*.{c,h} and ROOT/include/tessera/* (a public header belongs to the layer that
# owns it) must name its own layer or one it may include:
#   "tessera/X.h", "tessera/ops.def"   the layer owning X
#   "../L/file.h", "L/file.h"          layer L (a private header of another folder)
#   "file.h"                           the same folder: always fine
# and a private internal header (*_impl.h, *internal*.h) is only for its own layer, whatever the
# table allows. Prints one line per violation (file:line, the include, both layers) and exits 1;
# otherwise prints a one-line summary and exits 0 (2: the table or tree cannot be read).
# Usage: scripts/check_layers.sh [ROOT]   (ROOT defaults to the repository holding this script)
# POSIX sh + awk only: no Python needed.
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
root=$(cd "$root" && pwd)
doc=$root/docs/architecture.md
[ -r "$doc" ] || { echo "check_layers: $doc: cannot read the layer table" >&2; exit 2; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
{
  [ -d "$root/src" ] && find "$root/src" -mindepth 2 -maxdepth 2 -type f \( -name '*.c' -o -name '*.h' \)
  [ -d "$root/include/tessera" ] && find "$root/include/tessera" -maxdepth 1 -type f \( -name '*.h' -o -name '*.def' \)
} | LC_ALL=C sort > "$list"
# file names go to awk through a list (one per line), so no argument-length limit applies
awk -v root="$root" -v doc="$doc" -v list="$list" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function allowed(from, to) { return from == to || ((from SUBSEP to) in may) }
function bad(where, from, inc, to, why) {
  printf "%s: %s may not include %s (layer %s)%s\n", where, from, inc, to, why
  nbad++
}
BEGIN {
  intable = 0; nlayers = 0
  while ((getline line < doc) > 0) {
    if (line ~ /^\|[ \t]*layer[ \t]*\|[ \t]*folder[ \t]*\|[ \t]*owns[ \t]*\|[ \t]*may include[ \t]*\|/) { intable = 1; continue }
    if (!intable) continue
    if (line !~ /^\|/) { intable = 0; continue }
    if (line ~ /^\|[ \t:-]*\|/) continue                       # |---|---|
    n = split(line, c, "|")
    if (n < 6) { printf "check_layers: %s: a table row needs 4 columns: %s\n", doc, line > "/dev/stderr"; exit 2 }
    L = trim(c[2]); F = trim(c[3]); O = trim(c[4]); M = trim(c[5])
    if (L == "" || F == "") continue
    nlayers++
    folder[F] = L
    no = split(O, os, /[ \t]+/); for (i = 1; i <= no; i++) if (os[i] != "") owner[os[i]] = L
    nm = split(M, ms, /[ \t]+/); for (i = 1; i <= nm; i++) if (ms[i] != "") may[L, ms[i]] = 1
  }
  close(doc)
  if (!nlayers) { printf "check_layers: %s: no layer table (| layer | folder | owns | may include |)\n", doc > "/dev/stderr"; exit 2 }
  nfiles = 0; nincs = 0; nbad = 0
  while ((getline path < list) > 0) {
    rel = substr(path, length(root) + 2)
    nf = split(rel, parts, "/")
    if (parts[1] == "include") {
      pub = 1; mine = (parts[3] in owner) ? owner[parts[3]] : ""
      if (mine == "") { printf "%s: no layer owns this public header (docs/architecture.md)\n", rel; nbad++; continue }
    } else {
      pub = 0; f = parts[1] "/" parts[2]; mine = (f in folder) ? folder[f] : ""
      if (mine == "") { printf "%s: folder %s is not a layer in docs/architecture.md\n", rel, f; nbad++; continue }
    }
    nfiles++; ln = 0
    while ((getline text < path) > 0) {
      ln++
      if (text !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
      inc = text; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
      nincs++
      where = rel ":" ln
      if (inc ~ /^tessera\//) {
        h = substr(inc, 9)
        if (!(h in owner)) { printf "%s: no layer owns %s (docs/architecture.md)\n", where, inc; nbad++; continue }
        if (!allowed(mine, owner[h])) bad(where, mine, inc, owner[h], "")
        continue
      }
      if (inc !~ /\//) {                                        # the same folder
        if (pub && (inc in owner) && !allowed(mine, owner[inc])) bad(where, mine, inc, owner[inc], "")
        continue
      }
      p = inc; sub(/^(\.\.\/)+/, "", p)
      d = p; sub(/\/.*$/, "", d)
      if (!(("src/" d) in folder)) { printf "%s: %s names no layer folder (docs/architecture.md)\n", where, inc; nbad++; continue }
      to = folder["src/" d]
      base = p; sub(/^.*\//, "", base)
      if (!allowed(mine, to)) bad(where, mine, inc, to, "")
      else if (to != mine && (base ~ /_impl\.h$/ || base ~ /internal/))
        bad(where, mine, inc, to, ": an internal header is only for its own layer")
    }
    close(path)
  }
  close(list)
  if (nbad) { printf "check_layers: %d violation(s) in %d files\n", nbad, nfiles > "/dev/stderr"; exit 1 }
  printf "check_layers: %d files, %d includes, %d layers: every include points down the table\n", nfiles, nincs, nlayers
  exit 0
}'
