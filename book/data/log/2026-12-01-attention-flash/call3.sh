#!/usr/bin/env bash
# One H200, from the repository's root at 41febfa: the per-call floor of "flash" (floor.py).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=41febfa
t0=$(date +%s)
timeout 400 python3 .gpu/floor.py > $OUT/r/floor.jsonl 2> $OUT/r/floor.err
echo "floor rc=$? after $(( $(date +%s) - t0 )) s"; tail -c 600 $OUT/r/floor.err; cat $OUT/r/floor.jsonl
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
