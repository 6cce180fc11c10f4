#!/usr/bin/env bash
# On the GPU machine, the repository's tree as kept: build, then edge_1024.py.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 $(dirname $0)/edge_1024.py > $OUT/edge.jsonl 2> $OUT/edge.err
echo "rc=$? $(wc -l < $OUT/edge.jsonl) rows"
