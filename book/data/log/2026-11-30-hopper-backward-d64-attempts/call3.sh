#!/usr/bin/env bash
# One H200, from the repository's root, main as committed (4c5094b): wgmma_rate (built on a CPU machine with nvcc 13.0
# from wgmma_rate.cu, carried as .gpu/wgmma_rate), then the GPU tests of test_flash_triton.py, test_flash_hopper.py
# and test_memory.py.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
.gpu/wgmma_rate > $OUT/r/wgmma_rate.jsonl 2>&1
echo "wgmma_rate rc=$? after $(( $(date +%s) - t0 )) s"
left() { echo $(( 560 - ($(date +%s) - t0) )); }
SYSTEMS_GIT_COMMIT=4c5094b TORCH_EXTENSIONS_DIR=/tmp/ext_main PYTHONPATH=/tmp/site:$PWD timeout $(left) python3 -m pytest -m gpu \
  tests/test_flash_triton.py tests/test_flash_hopper.py tests/test_memory.py -v --durations=10 -p no:cacheprovider \
  > $OUT/r/pytest_main.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_main.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
