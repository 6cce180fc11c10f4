#!/usr/bin/env bash
# One H200: trees m and c built side by side (again, on a fresh machine); presets.py xl then large on m, c, c, m.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r/m $OUT/r/c
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m c; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s"
for turn in "m xl" "c xl" "c large" "m large"; do
  set -- $turn
  left=$(( 330 - ($(date +%s) - t0) ))
  (cd .gpu/$1 && OUT=$OUT/r/$1 TORCH_EXTENSIONS_DIR=/tmp/ext_$1 PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=b34ddc7 \
    timeout $left python3 ../presets.py $2 >> $OUT/r/$1/presets.log 2>> $OUT/r/$1/presets.err)
  echo "$1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
