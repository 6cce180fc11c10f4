#!/usr/bin/env bash
# Build the extensions, then sweep_bwd64.py, three rounds while time is left.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
for rnd in 0 1 2; do
  (( $(date +%s) - t0 > 200 )) && break
  timeout 60 python3 .gpu/sweep_bwd64.py $rnd >> $OUT/sweep.jsonl 2>> $OUT/sweep.err
  echo "round $rnd rc=$? after $(( $(date +%s) - t0 )) s"
done
