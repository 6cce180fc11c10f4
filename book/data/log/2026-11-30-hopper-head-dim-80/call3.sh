#!/usr/bin/env bash
# main with head dims 72 and 80 in the Hopper kernels: build; the 2.7B compiled step, sdpa and flash_hopper
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 560 - ($(date +%s) - t0) )) python3 .gpu/step27.py 4 > $OUT/step27.jsonl 2> $OUT/step27.err
echo "step rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/step27.jsonl | cut -c1-400; tail -3 $OUT/step27.err
