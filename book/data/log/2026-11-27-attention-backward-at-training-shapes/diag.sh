#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
t0=$(date +%s)
python3 -c 'from systems.attention.flash_cpp import _build_cuda; print("build:", _build_cuda())' 2>&1 | tail -2
echo "built after $(( $(date +%s) - t0 )) s"
timeout 400 python3 .gpu/diag.py > $OUT/diag.jsonl 2> $OUT/diag.err; echo "diag rc=$? after $(( $(date +%s) - t0 )) s"
tail -5 $OUT/diag.err
