#!/usr/bin/env bash
# the working tree (systems/offload.py, not yet used by the package): build; offload_spike.py at 4 blocks on the
# whole H200, then at 16 blocks in an H100 80GB's memory (hold.py holding the rest), expandable segments
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 200 python3 .gpu/offload_spike.py 4 groups_ffn_offload groups whole > $OUT/spike4.jsonl 2> $OUT/spike4.err
echo "spike4 rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-330 $OUT/spike4.jsonl; grep -v "^W1130\|Warning\|^ *$" $OUT/spike4.err | tail -4
python3 .gpu/hold.py > $OUT/hold.txt 2>&1 &
sleep 15; cat $OUT/hold.txt
timeout $(( 575 - ($(date +%s) - t0) )) python3 .gpu/offload_spike.py 16 groups_ffn_offload whole > $OUT/spike16.jsonl 2> $OUT/spike16.err
echo "spike16 rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-330 $OUT/spike16.jsonl; grep -v "^W1130\|Warning\|^ *$" $OUT/spike16.err | tail -4
kill %1
