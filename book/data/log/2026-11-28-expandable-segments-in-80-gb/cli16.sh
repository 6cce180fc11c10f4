#!/bin/bash
# the GPU test of the allocator setting, then the one-GPU command at 16 blocks in an H100 80GB's memory
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -m pytest -q -m gpu tests/test_harness.py -k expandable -p no:cacheprovider 2>&1 | tail -3
python3 .gpu/hold.py > $OUT/hold.txt 2>&1 &
sleep 20; cat $OUT/hold.txt
python3 -m systems.bench.leaderboard_2026 model --layers 16 --attention flash_hopper --recompute keep_attention \
  > $OUT/cli16.txt 2> $OUT/cli16.err
echo "rc=$?"; tail -c 3000 $OUT/cli16.txt; grep -v "Warning\|_logging\|^ *$" $OUT/cli16.err | tail -5
kill %1
echo "total $(( $(date +%s) - t0 )) s"
