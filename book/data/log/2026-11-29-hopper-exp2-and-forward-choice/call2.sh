#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/head (main as committed) and .gpu/sw (with the Hopper forward
# taken at head dim 64 causal at every length), built side by side; the forward's choice and the registered
# attention against the oracle on sw; then the eager steps of xl and large, sdpa and flash_hopper, each tree in turn.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r/head $OUT/r/sw
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in head sw; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
(cd .gpu/sw && TORCH_EXTENSIONS_DIR=/tmp/ext_sw PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m pytest -m gpu \
  tests/test_flash_hopper_cuda.py -v --durations=10 -p no:cacheprovider \
  -k "faster_forward or attention_matches or pass_pytorchs_checks") > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
for turn in "head xl" "sw xl" "sw large" "head large"; do
  set -- $turn
  left=$(( 585 - ($(date +%s) - t0) ))
  (cd .gpu/$1 && OUT=$OUT/r/$1 TORCH_EXTENSIONS_DIR=/tmp/ext_$1 PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=cdd2169 \
    timeout $left python3 ../presets.py $2 >> $OUT/r/$1/presets.log 2>> $OUT/r/$1/presets.err)
  echo "$1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
