#!/usr/bin/env bash
# main at 2010479: build; the 9 GPU tests of test_flash_hopper_cuda.py that call 1's time did not reach
# (tests_left.txt); the eager step of xl (context 1024, batch 4) and small (1024, batch 8), sdpa and flash_hopper
# interleaved (steps.py)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 300 python3 -m pytest -q -p no:cacheprovider $(cat .gpu/tests_left.txt) > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/pytest.log
for point in "xl 1024 4 eager" "small 1024 8 eager"; do
  timeout $(( 560 - ($(date +%s) - t0) )) python3 .gpu/steps.py $point >> $OUT/steps.jsonl 2>> $OUT/steps.err
  echo "$point rc=$? after $(( $(date +%s) - t0 )) s"
done
cut -c1-200 $OUT/steps.jsonl; tail -3 $OUT/steps.err
