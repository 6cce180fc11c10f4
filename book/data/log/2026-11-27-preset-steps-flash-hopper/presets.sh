#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH SYSTEMS_GIT_COMMIT=$(git rev-parse HEAD)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout $1 python3 .gpu/presets.py ${2:-xl,large,medium,small,2.7B} 2>$OUT/presets.err
echo rc=$?; tail -3 $OUT/presets.err
