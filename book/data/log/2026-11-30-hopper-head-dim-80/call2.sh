#!/usr/bin/env bash
# the working tree (head dims 72 and 80 in the Hopper kernels of 128): build; sweep80.py; every GPU test of
# test_flash_hopper_cuda.py
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 150 python3 .gpu/sweep80.py > $OUT/sweep80.jsonl 2> $OUT/sweep80.err
echo "sweep rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/sweep80.jsonl; tail -3 $OUT/sweep80.err
left=$(( 575 - ($(date +%s) - t0) ))
timeout $left python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -15
