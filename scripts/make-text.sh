#!/usr/bin/env bash
# The text the GPT examples train on (examples/gpt_*.yaml read data.path: data/input.txt): Debian's
# GPL-3, GPL-2 and Apache-2.0 licence texts (/usr/share/common-licenses, part of every Debian
# system: base-files), 64,599 bytes, byte-level tokens. Any UTF-8 or ASCII text file will do
# (tiny Shakespeare's input.txt, as in nanoGPT); this one needs no download.
# Usage: scripts/make-text.sh [OUT]   (default data/input.txt; written whole or not at all)
set -eu
out=${1:-data/input.txt}
src=/usr/share/common-licenses
for f in GPL-3 GPL-2 Apache-2.0; do
  [ -r "$src/$f" ] || { echo "make-text: $src/$f is missing (Debian's base-files package installs it)" >&2; exit 1; }
done
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat "$src/GPL-3" "$src/GPL-2" "$src/Apache-2.0" > "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out: $(wc -c < "$out") bytes (Debian's GPL-3, GPL-2 and Apache-2.0 texts)"
