#!/usr/bin/env bash
# main at 6af6804: the one-GPU command at 20 blocks with recompute="offload" in an H100 80GB's memory (hold.py
# holding the rest), ours and plain PyTorch's
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 .gpu/hold.py > $OUT/hold.txt 2>&1 &
sleep 15; cat $OUT/hold.txt
timeout $(( 320 - ($(date +%s) - t0) )) python3 -m systems.bench.leaderboard_2026 model --layers 20 --attention flash_hopper \
  --recompute offload > $OUT/cli20.txt 2> $OUT/cli20.err
echo "cli20 rc=$? after $(( $(date +%s) - t0 )) s"; tail -c 2500 $OUT/cli20.txt; grep -v "^W1130\|Warning\|^ *$" $OUT/cli20.err | tail -4
kill %1
