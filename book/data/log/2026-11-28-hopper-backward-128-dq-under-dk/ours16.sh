#!/bin/bash
# our 16-block step alone (fit_h100.py, expandable segments) while hold.py keeps the GPU at an H100 80GB's memory
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 .gpu/hold.py > $OUT/hold.txt 2>&1 &
sleep 15; cat $OUT/hold.txt
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 280 python3 .gpu/fit_h100.py held ours 16 2>&1 | grep -v "Warning\|_logging" | tail -3
kill %1
echo "total $(( $(date +%s) - t0 )) s"
