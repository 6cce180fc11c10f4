#!/usr/bin/env bash
# The GPU tests of the layouts flash_hopper promises (they build the kernels), then chapter 20 in the time left.
set -u
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "models_layout or operators" > $OUT/pytest_layout.log 2>&1
echo "pytest layout rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest_layout.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest_layout.log | head
.gpu/multi.sh $(( ${1:-560} - ($(date +%s) - t0) )) 20_flash_attention_hopper${2:-}
