#!/usr/bin/env bash
# One H200, from the repository's root: f = 3226330 (the consumers take dQ in turn at head dim 64) and m = main before
# it (185f0cb), built side by side. The GPU tests of the Hopper kernels on f (test_flash_hopper_cuda.py, then
# test_flash_hopper.py, test_flash_bench.py and test_memory.py), then ab_bwd.py one pass on m f f m, turns skipped
# past 520 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m f; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
(cd .gpu/f && export TORCH_EXTENSIONS_DIR=/tmp/ext_f PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=3226330 && \
  timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider ../../tests/test_flash_hopper_cuda.py > $OUT/pytest_hopper_cuda.log 2>&1; \
  echo "rc=$?" >> $OUT/pytest_hopper_cuda.log)
echo "test_flash_hopper_cuda: $(tail -n2 $OUT/pytest_hopper_cuda.log | tr '\n' ' ') after $(( $(date +%s) - t0 )) s"
(cd .gpu/f && export TORCH_EXTENSIONS_DIR=/tmp/ext_f PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=3226330 && \
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider ../../tests/test_flash_hopper.py ../../tests/test_flash_bench.py \
  ../../tests/test_memory.py > $OUT/pytest_others.log 2>&1; echo "rc=$?" >> $OUT/pytest_others.log)
echo "others: $(tail -n2 $OUT/pytest_others.log | tr '\n' ' ') after $(( $(date +%s) - t0 )) s"
for turn in "0 m" "0 f" "1 f" "1 m"; do
  set -- $turn
  if (( $(date +%s) - t0 > 520 )); then echo "skipped round $1 $2"; continue; fi
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_bwd.py $2 $1 one >> $OUT/ab_bwd.jsonl) 2>> $OUT/ab.err
  echo "round $1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
