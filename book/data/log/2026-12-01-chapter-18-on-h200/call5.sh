#!/usr/bin/env bash
# One H200, from the repository's root: timer.py, the sweeps' timer against do_bench alone.
set -u
tar xzf .gpu/ext.tgz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
t0=$(date +%s)
timeout 280 python3 .gpu/timer.py > $OUT/timer.jsonl 2> $OUT/timer.err
echo "timer rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/timer.jsonl; tail -c 1500 $OUT/timer.err
