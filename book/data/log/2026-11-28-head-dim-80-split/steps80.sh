#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout $1 python3 .gpu/steps80.py ${2:-0:4} 2>$OUT/steps80.err
echo rc=$?; tail -3 $OUT/steps80.err
