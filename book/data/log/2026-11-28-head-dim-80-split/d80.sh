#!/usr/bin/env bash
# one H200: the GPU tests of the split head dim, then the attention alone at head dim 80 (.gpu/d80.py)
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
git log --oneline -1 2>/dev/null
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_flash_triton.py -k "ragged or descriptors or long_sequences" > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? after $(( $(date +%s) - start )) s: $(tail -n1 $OUT/gpu_tests.log)"; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests.log | head
left=$(( ${1:-560} - ($(date +%s) - start) ))
timeout $left python3 .gpu/d80.py ${2:-2x32x2048x80,4x32x1024x80,8x32x512x80,8x32x2048x80,1x16x16384x80,2x32x2048x96} 2>$OUT/d80.err
echo "d80 rc=$? after $(( $(date +%s) - start )) s"; tail -3 $OUT/d80.err
