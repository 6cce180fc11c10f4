#!/usr/bin/env bash
# One H200, warm from call 3 (the trees' builds kept): fwd_bwd.py on head and sw, then the eager steps of medium
# and small, and xl and large a second time, sdpa and flash_hopper, each tree in turn.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r/head $OUT/r/sw
t0=$(date +%s)
for t in head sw sw head; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../fwd_bwd.py $t \
    >> $OUT/r/fwd_bwd.jsonl 2>> $OUT/r/fwd_bwd.err)
  echo "fwd_bwd $t rc=$? after $(( $(date +%s) - t0 )) s"
done
for turn in "sw medium,small" "head medium,small" "sw xl" "head xl" "head large" "sw large"; do
  set -- $turn
  left=$(( 470 - ($(date +%s) - t0) ))
  (cd .gpu/$1 && OUT=$OUT/r/$1 TORCH_EXTENSIONS_DIR=/tmp/ext_$1 PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=cdd2169 \
    timeout $left python3 ../presets.py $2 >> $OUT/r/$1/presets.log 2>> $OUT/r/$1/presets.err)
  echo "$1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
