#!/usr/bin/env bash
# Build the tree's extensions and the baseline's (.gpu/base) side by side; ab64.py alternating baseline and tree,
# two rounds; then the GPU tests of the Hopper backward on the tree, in the time left.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; d=torch.device("cuda"); print("build:", unavailable(d), host())'
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_base.log 2>&1) &
TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build.log 2>&1
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log) | base: $(tail -n1 $OUT/build_base.log)"
for rnd in 0 1; do
  (cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD timeout 90 python3 ../ab64.py base $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err)
  echo "base $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout 90 python3 .gpu/ab64.py new $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err
  echo "new $rnd rc=$? after $(( $(date +%s) - t0 )) s"
done
tail -3 $OUT/ab.err
export TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD
left=$(( 540 - ($(date +%s) - t0) ))
timeout $left python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "backward or model or cs336 or one_pass or takes or operators" > $OUT/pytest.log 2>&1
echo "pytest hopper rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
