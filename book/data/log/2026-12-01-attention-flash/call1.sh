#!/usr/bin/env bash
# One H200, from the repository's root at 41febfa: the GPU tests of attention "flash" and of flash_hopper, of the fused
# kernels and of offloading; then the small preset's step with "flash", "flash_hopper" and "sdpa".
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)' >> $OUT/r/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=41febfa
t0=$(date +%s)
timeout 380 python3 -m pytest -m gpu tests/test_flash_fastest.py tests/test_flash_hopper_cuda.py tests/test_fused.py \
  tests/test_offload.py -v --durations=15 -p no:cacheprovider > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
t0=$(date +%s)
timeout 150 python3 .gpu/flash_steps.py > $OUT/r/steps.jsonl 2> $OUT/r/steps.err
echo "steps rc=$? after $(( $(date +%s) - t0 )) s"; tail -n 3 $OUT/r/steps.err
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
