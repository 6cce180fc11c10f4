#!/usr/bin/env bash
# main at 2010479: build; the compiled step of small (batch 32) and medium (batch 16) at context 2048, sdpa and
# flash_hopper interleaved (steps.py); then every GPU test of test_flash_hopper_cuda.py in what time is left
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
for point in "small 2048 32 compiled" "medium 2048 16 compiled"; do
  timeout $(( 400 - ($(date +%s) - t0) )) python3 .gpu/steps.py $point >> $OUT/steps.jsonl 2>> $OUT/steps.err
  echo "$point rc=$? after $(( $(date +%s) - t0 )) s"
done
cut -c1-200 $OUT/steps.jsonl; tail -3 $OUT/steps.err
timeout $(( 580 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest.log | tail -15
