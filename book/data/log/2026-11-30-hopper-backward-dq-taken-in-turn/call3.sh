#!/usr/bin/env bash
# One H200, from the repository's root: m = main (185f0cb) and four trees built from it side by side: af (af.diff: at
# head dim 64 one consumer in turn multiplies a tile's dQ over both consumers' dS^T, the other fencing its registers
# before an empty group), asf (asf.diff: af with dS^T stored by stmatrix), af3 (af with three ring stages without the
# mask), afl (af with L and D read after the waits without the mask); ab_bwd.py one pass, round 0 in the order
# m af asf af3 afl, round 1 reversed, turns skipped past 470 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m af asf af3 afl; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 af" "0 asf" "0 af3" "0 afl" "1 afl" "1 af3" "1 asf" "1 af" "1 m"; do
  set -- $turn
  if (( $(date +%s) - t0 > 470 )); then echo "skipped round $1 $2"; continue; fi
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 90 python3 ../ab_bwd.py $2 $1 one >> $OUT/ab_bwd.jsonl) 2>> $OUT/ab.err
  echo "round $1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
