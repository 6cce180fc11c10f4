#!/usr/bin/env bash
# main with head dims 72 and 80 in the Hopper kernels: build; the 2.7B eager step at context 2048 (batch 4) and 1024
# (batch 8); the xl compiled step at 2048 (batch 4); sdpa and flash_hopper interleaved
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
for point in "2.7B 2048 4 eager" "2.7B 1024 8 eager" "xl 2048 4 compiled"; do
  timeout $(( 570 - ($(date +%s) - t0) )) python3 .gpu/steps4.py $point >> $OUT/steps.jsonl 2>> $OUT/steps.err
  echo "$point rc=$? after $(( $(date +%s) - t0 )) s"
done
cut -c1-260 $OUT/steps.jsonl; tail -3 $OUT/steps.err
