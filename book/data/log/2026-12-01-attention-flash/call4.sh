#!/usr/bin/env bash
# One H200, from the repository's root at 1bb435d: the one-GPU leaderboard command as a user runs it, with its
# default attentions (sdpa_cudnn and flash), 2 blocks.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=1bb435d
t0=$(date +%s)
timeout 480 python3 -m systems.bench.leaderboard_2026 model --layers 2 --rep 300 > $OUT/r/model2.txt 2> $OUT/r/model2.err
echo "model rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/r/model2.txt; tail -c 400 $OUT/r/model2.err
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
