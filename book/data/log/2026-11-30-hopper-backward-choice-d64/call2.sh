#!/usr/bin/env bash
# the working tree (flash_hopper takes the Hopper backward at every shape): build; tiny64.py; every GPU test of
# test_flash_hopper_cuda.py
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 60 python3 .gpu/tiny64.py > $OUT/tiny64.jsonl 2> $OUT/tiny64.err
echo "tiny64 rc=$? after $(( $(date +%s) - t0 )) s, $(wc -l < $OUT/tiny64.jsonl) timings"; tail -2 $OUT/tiny64.err
timeout $(( 490 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -15
