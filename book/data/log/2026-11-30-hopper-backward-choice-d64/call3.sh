#!/usr/bin/env bash
# main at 91b1c0d (8615f3d's code): build; against_cudnn.py; the xl preset's eager step at context 1024, batch 4,
# sdpa and flash_hopper interleaved (steps.py of 2026-11-30-steps-small-medium)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 60 python3 .gpu/against_cudnn.py > $OUT/against_cudnn.jsonl 2> $OUT/against_cudnn.err
echo "against_cudnn rc=$? after $(( $(date +%s) - t0 )) s"; tail -2 $OUT/against_cudnn.err
timeout $(( 225 - ($(date +%s) - t0) )) python3 .gpu/steps.py xl 1024 4 eager > $OUT/steps.jsonl 2> $OUT/steps.err
echo "steps rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-150 $OUT/steps.jsonl
