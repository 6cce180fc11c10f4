#!/usr/bin/env bash
# One H200, from the repository's root: handout.py, handout_ms on the leaderboard command's 2-block step.
set -u
tar xzf .gpu/ext.tgz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
t0=$(date +%s)
timeout 230 python3 .gpu/handout.py > $OUT/handout.txt 2> $OUT/handout.err
echo "handout rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/handout.txt; tail -c 1000 $OUT/handout.err
