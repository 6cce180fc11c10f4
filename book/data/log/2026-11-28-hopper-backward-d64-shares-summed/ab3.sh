#!/usr/bin/env bash
# Build the extensions of three trees side by side (.gpu/base: the commit before; .gpu/v1, .gpu/v2: the variants of
# the head-dim-64 dQ hand-off); ab64.py alternating them, three rounds while time is left.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; d=torch.device("cuda"); print("build:", unavailable(d))'
for t in base v1 v2; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for rnd in 0 1 2; do
  (( $(date +%s) - t0 > 450 )) && break
  for t in base v1 v2; do
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../ab64.py $t $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err)
    echo "$t $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  done
done
tail -3 $OUT/ab.err
