#!/usr/bin/env bash
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_flash_triton.py -k "ragged and 80 or descriptors and 80 or single_pass" > $OUT/gpu_tests2.log 2>&1
echo "tests rc=$? after $(( $(date +%s) - start )) s: $(tail -n1 $OUT/gpu_tests2.log)"; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests2.log | head
timeout 150 python3 .gpu/onepass80.py 8x32x2048x80,4x32x2048x80,1x16x16384x80,16x32x512x80 2>$OUT/onepass80.err
echo "onepass rc=$? after $(( $(date +%s) - start )) s"; tail -2 $OUT/onepass80.err
left=$(( ${1:-540} - ($(date +%s) - start) ))
timeout $left python3 .gpu/steps80.py 0:3 2>$OUT/steps80.err
echo "steps rc=$? after $(( $(date +%s) - start )) s"; tail -2 $OUT/steps80.err
