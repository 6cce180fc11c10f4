#!/usr/bin/env bash
# One H200, from the repository's root: every GPU test of the files call 4 did not run.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
t0=$(date +%s)
timeout 580 python3 -m pytest -m gpu tests/test_flash_triton.py tests/test_flash_cuda.py tests/test_flash_triton_host.py \
  tests/test_flash_hopper.py tests/test_memory.py tests/test_flash_pytorch.py tests/test_harness.py tests/test_flash_bench.py \
  -v --durations=15 -p no:cacheprovider > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
