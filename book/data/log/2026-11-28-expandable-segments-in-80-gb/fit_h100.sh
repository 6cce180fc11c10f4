#!/bin/bash
# each point a fresh process: the allocator's settings hold from a process's first allocation
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee $OUT/gpu.txt
t0=$(date +%s)
python3 -c "import torch; from systems.attention.flash_cpp import hopper; print(hopper.unavailable(torch.device('cuda')))" 2>&1 | tail -2
echo "build $(( $(date +%s) - t0 )) s"
run() { echo "== $*"; timeout 300 python3 .gpu/fit_h100.py "$@" 2>&1 | grep -v Warning | tail -6; }
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run h100 ours 16 14 12
run h100 ours 16
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run h100 plain
run none ours 16
echo "total $(( $(date +%s) - t0 )) s"
