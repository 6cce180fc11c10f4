#!/usr/bin/env bash
# On the machine that holds the repository: the three trees ab_three.sh times, under .gpu/ (ignored by git):
# base (HEAD's systems/), uniform (uniform_index_untimed.diff applied), persistent (persistent_untimed.diff).
set -eu
here=$(dirname "$0")
for tree in base uniform persistent; do
  rm -rf .gpu/$tree && mkdir -p .gpu/$tree && git archive HEAD systems tests | tar -x -C .gpu/$tree
done
(cd .gpu/uniform && patch -s -p1 < "../../$here/uniform_index_untimed.diff")
(cd .gpu/persistent && patch -s -p1 < "../../$here/persistent_untimed.diff")
cp "$here/../2026-11-28-hopper-backward-d64-shares-summed/ab64.py" "$here/probe_overhead.py" .gpu/
echo "trees ready: base uniform persistent"
