#!/usr/bin/env bash
# the working tree (systems/offload.py: the last group hooked too, bringing back the one before it): build;
# offload_spike.py at 4 blocks on the whole H200 (timed), then the offloaded step profiled
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 200 python3 .gpu/offload_spike.py 4 groups_ffn_offload groups_ffn groups > $OUT/spike4.jsonl 2> $OUT/spike4.err
echo "spike4 rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-330 $OUT/spike4.jsonl; grep -v "^W1130\|Warning\|^ *$" $OUT/spike4.err | tail -4
mkdir -p /tmp/tr
timeout $(( 400 - ($(date +%s) - t0) )) python3 .gpu/offload_spike.py 4 groups_ffn_offload groups --profile /tmp/tr > $OUT/profile.log 2>&1
echo "profile rc=$? after $(( $(date +%s) - t0 )) s"; grep -v "^W1130\|Warning\|^ *$" $OUT/profile.log | tail -3
(cd /tmp/tr && tar czf $OUT/traces.tgz *.json); ls -la $OUT/traces.tgz
