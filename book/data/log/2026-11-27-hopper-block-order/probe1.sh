#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 570 - ($(date +%s) - t0) )) python3 .gpu/probe1.py > $OUT/probe1.jsonl 2> $OUT/probe1.err
echo "probe rc=$? after $(( $(date +%s) - t0 )) s"; tail -12 $OUT/probe1.err
