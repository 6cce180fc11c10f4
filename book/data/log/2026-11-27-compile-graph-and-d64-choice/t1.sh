#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD TORCH_EXTENSIONS_DIR=/tmp/ext_new
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
ATTNS=flash_hopper,sdpa_cudnn,flash_hopper timeout 300 python3 .gpu/prof.py block > $OUT/prof.log 2> $OUT/prof.err
echo "prof rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/prof.log
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_flash_hopper_cuda.py tests/test_flash_cuda.py -k compiled > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
cd $OUT && tar czf prof.tgz *.csv *.json prof.err && rm -f *.json prof.err
