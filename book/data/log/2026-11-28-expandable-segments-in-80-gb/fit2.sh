#!/bin/bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 .gpu/env_check.py 2>&1 | tail -2
python3 -c "import torch; x=torch.empty(1<<26, device='cuda'); print('default:', [s.get('is_expandable') for s in torch.cuda.memory._snapshot()['segments']])"
run() { echo "== $*"; timeout 300 python3 .gpu/fit_h100.py "$@" 2>&1 | grep -v "Warning\|_logging" | tail -4; }
run none plain
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run h100 plain
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run h100 ours 16
echo "total $(( $(date +%s) - t0 )) s"
