#!/usr/bin/env bash
# The committed tree's Hopper GPU tests that touch what changed: the backward, the registered choice, the operators,
# torch.compile, the model and the CS336 tests; (flash_cuda's file is as it was tested at b7618eb).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
t0=$(date +%s)
timeout 200 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "backward or takes or 4100x4500 or 700x4200 or cs336 or compiled or model or operators" > $OUT/pytest.log 2>&1
echo "pytest hopper rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
