#!/usr/bin/env bash
# the working tree (recompute="offload"): build; the offload GPU test; then the one-GPU command at 16 blocks with
# recompute="offload" in an H100 80GB's memory (hold.py holding the rest), ours and plain PyTorch's
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_offload.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -5
python3 .gpu/hold.py > $OUT/hold.txt 2>&1 &
sleep 15; cat $OUT/hold.txt
timeout $(( 570 - ($(date +%s) - t0) )) python3 -m systems.bench.leaderboard_2026 model --layers 16 --attention flash_hopper \
  --recompute offload > $OUT/cli16.txt 2> $OUT/cli16.err
echo "cli16 rc=$? after $(( $(date +%s) - t0 )) s"; tail -c 2500 $OUT/cli16.txt; grep -v "^W1130\|Warning\|^ *$" $OUT/cli16.err | tail -4
kill %1
