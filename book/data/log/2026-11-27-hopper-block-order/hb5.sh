#!/usr/bin/env bash
# Build, then the GPU tests of flash_hopper's choice of forward and backward, its ops' checks, compiled and in the model.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout $(( 240 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "takes or operators or compiled or model or cs336" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
