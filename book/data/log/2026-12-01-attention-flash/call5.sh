#!/usr/bin/env bash
# One H200, from the repository's root at 9cdfa9e: short_steps.py.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=9cdfa9e
t0=$(date +%s)
timeout 330 python3 .gpu/short_steps.py > $OUT/r/short.jsonl 2> $OUT/r/short.err
echo "short rc=$? after $(( $(date +%s) - t0 )) s"; tail -c 300 $OUT/r/short.err
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
