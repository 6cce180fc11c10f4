#!/usr/bin/env bash
# main at 48cb704: build; choice64.py (the Hopper and Triton backwards at head dim 64 where flash_hopper's choice
# between them changes)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 330 - ($(date +%s) - t0) )) python3 .gpu/choice64.py > $OUT/choice64.jsonl 2> $OUT/choice64.err
echo "choice64 rc=$? after $(( $(date +%s) - t0 )) s, $(wc -l < $OUT/choice64.jsonl) timings"; tail -3 $OUT/choice64.err
