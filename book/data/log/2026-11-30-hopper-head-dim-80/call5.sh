#!/usr/bin/env bash
# main at the head-dim-80 change's last commit: build; every GPU test of test_flash_hopper_cuda.py; then sweep80.py's
# first two shapes if time is left
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -15
