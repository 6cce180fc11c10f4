#!/usr/bin/env bash
# One H200, from the repository's root (the working tree: beaef18): the GPU tests of every file but
# test_flash_hopper_cuda.py (run by call2.sh), in one pytest run stopped at 560 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
SYSTEMS_GIT_COMMIT=beaef18 TORCH_EXTENSIONS_DIR=/tmp/ext_w PYTHONPATH=/tmp/site:$PWD timeout 560 python3 -m pytest -m gpu \
  tests/test_memory.py tests/test_flash_cuda.py tests/test_fused.py tests/test_flash_pytorch.py tests/test_harness.py \
  tests/test_flash_bench.py tests/test_flash_triton_host.py tests/test_flash_hopper.py tests/test_flash_triton.py \
  -v --durations=10 -p no:cacheprovider > $OUT/r/pytest_rest.log 2>&1
echo "pytest rc=$?: $(tail -n1 $OUT/r/pytest_rest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
