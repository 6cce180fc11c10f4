#!/usr/bin/env bash
# n = d56db4a alone: prof_step.py large 8 (the compiled large step's kernels with sdpa and with flash_hopper).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
cd .gpu/n && export TORCH_EXTENSIONS_DIR=/tmp/ext_n PYTHONPATH=/tmp/site:$PWD
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
echo "built after $(( $(date +%s) - t0 )) s"
timeout $(( 500 - ($(date +%s) - t0) )) python3 ../prof_step.py large 8 > $OUT/prof_step.jsonl 2> $OUT/prof_step.err
echo "prof rc=$? after $(( $(date +%s) - t0 )) s"
tail -c 1500 $OUT/prof_step.err
