#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD TORCH_EXTENSIONS_DIR=/tmp/ext_new
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
for r in 0 1; do timeout 200 python3 .gpu/sweep64.py $r >> $OUT/sweep.jsonl 2>> $OUT/sweep.err; echo "round $r rc=$? after $(( $(date +%s) - t0 )) s"; done
tail -3 $OUT/sweep.err
