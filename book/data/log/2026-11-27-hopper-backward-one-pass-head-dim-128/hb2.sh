#!/usr/bin/env bash
# Build the Hopper kernels of the working tree, their GPU tests (the backward's and what uses it), then hb2_bench.py.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 220 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -x -p no:cacheprovider -k "backward or operators" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
timeout 240 python3 .gpu/hb2_bench.py > $OUT/hb.jsonl 2> $OUT/hb.err
echo "bench rc=$? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/hb.err
