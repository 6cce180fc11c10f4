#!/usr/bin/env bash
# Build the tree as committed (.gpu/base) and a variant (.gpu/v1: the one-pass dK/dV loop issuing S^T before the last
# tile's dQ share) side by side, the variant's backward oracle tests, then abb.py alternating the two, two rounds.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_cpp import cuda_unavailable; d=torch.device("cuda"); print("build:", unavailable(d), cuda_unavailable(d))'
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_base.log 2>&1) &
(cd .gpu/v1 && TORCH_EXTENSIONS_DIR=/tmp/ext_v1 PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_v1.log 2>&1)
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build_v1.log) | base: $(tail -n1 $OUT/build_base.log)"
(cd .gpu/v1 && TORCH_EXTENSIONS_DIR=/tmp/ext_v1 PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "backward_matches_the_oracle or one_pass" > $OUT/pytest_v1.log 2>&1)
echo "pytest v1 rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest_v1.log)"
for rnd in 0 1; do
  for tree in base v1; do
    (cd .gpu/$tree && TORCH_EXTENSIONS_DIR=/tmp/ext_$tree PYTHONPATH=/tmp/site:$PWD timeout 80 python3 ../abb.py $tree $rnd >> $OUT/abv.jsonl 2>> $OUT/abv.err)
    echo "$tree $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  done
done
tail -3 $OUT/abv.err
