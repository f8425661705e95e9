#!/bin/sh
# Include-direction and public/internal check. Input: two tables in ROOT/docs/architecture.md.
#
# The layer table (| layer | folder | public headers | internal headers | may include |): a
# layer's PUBLIC headers live in include/tessera/ (installed; what users program against), its
# INTERNAL headers in its folder src/<layer>/ (not installed; the interface it offers the layers
# above, included as "<layer>/file.h"); every other header of a folder is PRIVATE to it.
# The allow-list (| file | may include | why |): a cross-layer include of a private header, each
# with its reason.
#
# Checked, one line per violation (file:line, the include, both layers):
#   - every #include "..." in ROOT/src/<layer>/*.{c,h} and ROOT/include/tessera/* (a public
#     header belongs to the layer that owns it) names its own layer or one it may include:
#       "tessera/X.h", "tessera/ops.def"   the layer owning public header X
#       "../L/file.h", "L/file.h"          layer L
#       "file.h"                           the same folder: always fine
#   - a public header includes public headers only (never a src/ one);
#   - a header of another layer's folder is one of its internal headers, or the include is on
#     the allow-list (private headers, *_impl.h and *internal*.h among them, stay in their layer);
#   - every file in include/tessera/ is some layer's public header, every listed header exists,
#     an internal header is not also public, and every allow-list row is still used.
# Exits 1 on violations; otherwise prints a one-line summary and exits 0 (2: the tables or the
# tree cannot be read).
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
  [ -d "$root/include/tessera" ] && find "$root/include/tessera" -maxdepth 1 -type f
} | LC_ALL=C sort > "$list"
# file names go to awk through a list (one per line), so no argument-length limit applies
awk -v root="$root" -v doc="$doc" -v list="$list" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function allowed(from, to) { return from == to || ((from SUBSEP to) in may) }
function bad(where, from, inc, to, why) {
  printf "%s: %s may not include %s (layer %s)%s\n", where, from, inc, to, why
  nbad++
}
function cells(line, c,   n) { n = split(line, c, "|"); return n }
BEGIN {
  table = 0; nlayers = 0; nallow = 0
  while ((getline line < doc) > 0) {
    if (line ~ /^\|[ \t]*layer[ \t]*\|[ \t]*folder[ \t]*\|[ \t]*public headers[ \t]*\|[ \t]*internal headers[ \t]*\|[ \t]*may include[ \t]*\|/) { table = 1; continue }
    if (line ~ /^\|[ \t]*file[ \t]*\|[ \t]*may include[ \t]*\|[ \t]*why[ \t]*\|/) { table = 2; continue }
    if (!table) continue
    if (line !~ /^\|/) { table = 0; continue }
    if (line ~ /^\|[ \t:-]*\|/) continue                       # |---|---|
    n = cells(line, c)
    if (table == 1) {
      if (n < 7) { printf "check_layers: %s: a layer row needs 5 columns: %s\n", doc, line > "/dev/stderr"; exit 2 }
      L = trim(c[2]); F = trim(c[3]); P = trim(c[4]); I = trim(c[5]); M = trim(c[6])
      if (L == "" || F == "") continue
      nlayers++
      folder[F] = L; folderof[L] = F
      np = split(P, ps, /[ \t]+/); for (i = 1; i <= np; i++) if (ps[i] != "") owner[ps[i]] = L
      ni = split(I, is, /[ \t]+/); for (i = 1; i <= ni; i++) if (is[i] != "") { internal[F "/" is[i]] = L; ninternal++ }
      nm = split(M, ms, /[ \t]+/); for (i = 1; i <= nm; i++) if (ms[i] != "") may[L, ms[i]] = 1
    } else {
      if (n < 5) { printf "check_layers: %s: an allow-list row needs 3 columns: %s\n", doc, line > "/dev/stderr"; exit 2 }
      f = trim(c[2]); h = trim(c[3]); w = trim(c[4])
      gsub(/`/, "", f); gsub(/`/, "", h)
      if (f == "" || h == "") continue
      if (w == "") { printf "check_layers: %s: allow-list row without a reason: %s\n", doc, line > "/dev/stderr"; exit 2 }
      allow[f, h] = 1; allowrow[++nallow] = f SUBSEP h
    }
  }
  close(doc)
  if (!nlayers) { printf "check_layers: %s: no layer table (| layer | folder | public headers | internal headers | may include |)\n", doc > "/dev/stderr"; exit 2 }
  nfiles = 0; nincs = 0; nbad = 0
  while ((getline path < list) > 0) {
    rel = substr(path, length(root) + 2)
    nf = split(rel, parts, "/")
    if (parts[1] == "include") {
      pub = 1; mine = (parts[3] in owner) ? owner[parts[3]] : ""
      seenpub[parts[3]] = 1
      if (mine == "") { printf "%s: no layer owns this public header (docs/architecture.md)\n", rel; nbad++; continue }
    } else {
      pub = 0; f = parts[1] "/" parts[2]; mine = (f in folder) ? folder[f] : ""
      seenfile[rel] = 1
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
        if (pub && parts[3] == "tessera.h") { if (!(h in owner)) { printf "%s: no layer owns %s (docs/architecture.md)\n", where, inc; nbad++ }; continue }
        if (!(h in owner)) { printf "%s: no layer owns %s (docs/architecture.md)\n", where, inc; nbad++; continue }
        if (!allowed(mine, owner[h])) bad(where, mine, inc, owner[h], "")
        continue
      }
      if (pub) {                                                # public headers: public ones only
        if (inc ~ /\// || !(inc in owner)) { printf "%s: a public header may include only public headers (\"tessera/...\"), not %s\n", where, inc; nbad++ }
        else if (!allowed(mine, owner[inc])) bad(where, mine, inc, owner[inc], "")
        continue
      }
      if (inc !~ /\//) continue                                 # the same folder
      p = inc; sub(/^(\.\.\/)+/, "", p)
      d = p; sub(/\/.*$/, "", d)
      if (!(("src/" d) in folder)) { printf "%s: %s names no layer folder (docs/architecture.md)\n", where, inc; nbad++; continue }
      to = folder["src/" d]
      if (to == mine) continue
      if ((rel SUBSEP p) in allow) { used[rel SUBSEP p] = 1; continue }
      if (!allowed(mine, to)) { bad(where, mine, inc, to, ""); continue }
      if (("src/" p) in internal) continue
      bad(where, mine, inc, to, ": a private header of its layer (not among its internal headers, nor on the allow-list)")
    }
    close(path)
  }
  close(list)
  for (h in owner) if (!(h in seenpub)) { printf "docs/architecture.md: public header %s of layer %s is not in include/tessera/\n", h, owner[h]; nbad++ }
  for (h in internal) {
    if (!(h in seenfile)) { printf "docs/architecture.md: internal header %s of layer %s does not exist\n", h, internal[h]; nbad++ }
    b = h; sub(/^.*\//, "", b)
    if (b in owner) { printf "docs/architecture.md: %s is both a public and an internal header\n", b; nbad++ }
    if (b ~ /_impl\.h$/ || b ~ /internal/) { printf "docs/architecture.md: %s is named private (*_impl.h, *internal*) but listed as an internal header\n", h; nbad++ }
  }
  for (k = 1; k <= nallow; k++) if (!(allowrow[k] in used)) {
    split(allowrow[k], ar, SUBSEP); printf "docs/architecture.md: allow-list row %s -> %s matches no include\n", ar[1], ar[2]; nbad++
  }
  if (nbad) { printf "check_layers: %d violation(s) in %d files\n", nbad, nfiles > "/dev/stderr"; exit 1 }
  printf "check_layers: %d files, %d includes, %d layers (%d internal headers, %d allow-list rows): every include points down the table\n", nfiles, nincs, nlayers, ninternal, nallow
  exit 0
}'
