#!/usr/bin/env bash
# Build the tree's extensions and a baseline copy's (.gpu/base) side by side, the backward's GPU tests on the tree,
# then abb.py alternating baseline and tree, two rounds each.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_cpp import cuda_unavailable; d=torch.device("cuda"); print("build:", unavailable(d), cuda_unavailable(d))'
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_base.log 2>&1) &
TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build.log 2>&1
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log) | base: $(tail -n1 $OUT/build_base.log)"
export TORCH_EXTENSIONS_DIR=/tmp/ext_new
PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "backward or takes or 4100x4500 or 700x4200" > $OUT/pytest.log 2>&1
echo "pytest hopper rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m pytest -m gpu tests/test_flash_cuda.py -q -p no:cacheprovider -k "oracle or deterministic or stride" > $OUT/pytest_cuda.log 2>&1
echo "pytest cuda rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest_cuda.log)"
for rnd in 0 1; do
  (cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../abb.py base $rnd >> $OUT/abb.jsonl 2>> $OUT/abb.err)
  echo "base $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout 100 python3 .gpu/abb.py new $rnd >> $OUT/abb.jsonl 2>> $OUT/abb.err
  echo "new $rnd rc=$? after $(( $(date +%s) - t0 )) s"
done
tail -3 $OUT/abb.err
