#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
timeout 480 python3 .gpu/tiles.py > $OUT/tiles.jsonl 2> $OUT/tiles.err; echo "rc=$? after $(( $(date +%s) - t0 )) s"
tail -5 $OUT/tiles.err
