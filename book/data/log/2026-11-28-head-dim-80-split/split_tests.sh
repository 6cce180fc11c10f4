#!/usr/bin/env bash
# GPU tests after the kernels were split into modules: the Triton kernels at the split head dims and the C++ host path
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${1:-240} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_flash_triton_host.py tests/test_flash_triton.py -k "host_path_against or ragged and 80 or ragged and 48 or descriptors and 80 or single_pass" > $OUT/split_tests.log 2>&1
echo "tests rc=$? after $(( $(date +%s) - start )) s: $(tail -n1 $OUT/split_tests.log)"; grep -E "^(FAILED|ERROR)" $OUT/split_tests.log | head
