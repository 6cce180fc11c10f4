#!/usr/bin/env bash
# h = 7f494b0 alone (d56db4a's kernels): prof_step.py xl 4 (the compiled xl step's kernels with sdpa and with flash_hopper).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
cd .gpu/h && export TORCH_EXTENSIONS_DIR=/tmp/ext_h PYTHONPATH=/tmp/site:$PWD
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
echo "built after $(( $(date +%s) - t0 )) s"
timeout $(( 385 - ($(date +%s) - t0) )) python3 ../prof_step.py xl 4 > $OUT/prof_step.jsonl 2> $OUT/prof_step.err
echo "prof rc=$? after $(( $(date +%s) - t0 )) s"
tail -c 1500 $OUT/prof_step.err
