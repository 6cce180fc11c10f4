#!/usr/bin/env bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD TORCH_EXTENSIONS_DIR=/tmp/ext_new
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
TORCH_LOGS=output_code timeout 420 python3 .gpu/prof.py "$@" > $OUT/prof.log 2> $OUT/prof.err
echo "prof rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/prof.log; grep -v "^\s" $OUT/prof.err | grep -iE "error|warn" | head -5
cd $OUT && tar czf prof.tgz *.csv *.json prof.err && rm -f *.json prof.err
