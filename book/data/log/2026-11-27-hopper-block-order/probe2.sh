#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 300 python3 .gpu/probe2.py > $OUT/probe2.jsonl 2> $OUT/probe2.err
echo "probe rc=$? after $(( $(date +%s) - t0 )) s"; tail -4 $OUT/probe2.err
timeout $(( 575 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -x -k "attention_matches or backward or takes or cs336 or compiled or model or operators" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
