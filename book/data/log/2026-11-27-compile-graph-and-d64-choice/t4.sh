#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD TORCH_EXTENSIONS_DIR=/tmp/ext_new
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_flash_hopper_cuda.py -k "faster or compiled or model" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
timeout $(( 470 - ($(date +%s) - t0) )) python3 .gpu/steps2.py small:32 xl:4 medium:16 large:8 > $OUT/steps.jsonl 2> $OUT/steps.err
echo "steps rc=$? after $(( $(date +%s) - t0 )) s"; cut -c1-200 $OUT/steps.jsonl; tail -2 $OUT/steps.err
