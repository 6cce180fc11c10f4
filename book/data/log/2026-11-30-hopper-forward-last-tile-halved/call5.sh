#!/usr/bin/env bash
# One H200, from the repository's root: g = c207054 (every causal two-consumer variant halving its last key tile below
# 8,192 keys; flash_hopper's kernels the same SASS as f's), built alone; the GPU tests of test_flash_hopper_cuda.py
# that run the forward's variants against the oracle, stopped at 110 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
t0=$(date +%s)
cd .gpu/g && export TORCH_EXTENSIONS_DIR=/tmp/ext_g PYTHONPATH=/tmp/site:$PWD
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
echo "built after $(( $(date +%s) - t0 )) s"
timeout 110 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py -k "forward_variants or halved" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(grep -c PASSED $OUT/pytest.log) passed, $(grep -c FAILED $OUT/pytest.log) failed"
