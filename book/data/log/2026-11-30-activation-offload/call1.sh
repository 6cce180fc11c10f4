#!/usr/bin/env bash
# main at 85b4e32: probe.py (host memory, pinned copies); build; every GPU test of test_flash_hopper_cuda.py
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv > $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
(ulimit -l; free -g; nproc) >> $OUT/machine.txt 2>&1
timeout 150 python3 .gpu/probe.py > $OUT/probe.jsonl 2> $OUT/probe.err
echo "probe rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-250 $OUT/probe.jsonl; tail -3 $OUT/probe.err
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 540 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -15
