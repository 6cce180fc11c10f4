#!/usr/bin/env bash
# One H200, from the repository's root: f (as in call3.sh) alone; hold.py keeps everything above an H100 80GB's
# memory in another process, then steps.py (chapter 20's compiled training step, sdpa and flash_hopper interleaved
# on one model, at the largest batch up to 64 whose eager step fits) for each preset in turn, one process each,
# each stopped at the time the call has left (560 s in all).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
cd .gpu/f && export TORCH_EXTENSIONS_DIR=/tmp/ext_f PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=$(cat ../commit)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
echo "built after $(( $(date +%s) - t0 )) s"
python3 ../hold.py > $OUT/hold.txt 2>&1 &
hold=$!
sleep 15
cat $OUT/hold.txt
for size in small medium large xl; do
  left=$(( 560 - ($(date +%s) - t0) ))
  if (( left < 60 )); then echo "skipped $size"; continue; fi
  timeout $left python3 ../steps.py $size >> $OUT/steps.jsonl 2>> $OUT/steps.err
  echo "$size rc=$? after $(( $(date +%s) - t0 )) s"
done
kill $hold
