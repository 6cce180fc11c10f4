#!/usr/bin/env bash
# One H200, from the repository's root: m = main (9fcce7e) and two trees built from it side by side: h (h.diff: a
# consumer's last key tile halved in its own instantiation, taken causal with two consumers at every length), h0
# (h0.diff: the same code, never taken); ab_fwd.py, round 0 in the order m h h0, round 1 reversed, turns skipped
# past 420 s; then table.py on m while the call has time.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m h h0; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 h" "0 h0" "1 h0" "1 h" "1 m"; do
  set -- $turn
  if (( $(date +%s) - t0 > 420 )); then echo "skipped round $1 $2"; continue; fi
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 90 python3 ../ab_fwd.py $2 $1 >> $OUT/ab_fwd.jsonl) 2>> $OUT/ab.err
  echo "round $1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
left=$(( 560 - ($(date +%s) - t0) ))
if (( left > 60 )); then
  (cd .gpu/m && export TORCH_EXTENSIONS_DIR=/tmp/ext_m PYTHONPATH=/tmp/site:$PWD && timeout $left python3 ../table.py m fwd fwd_bwd >> $OUT/table.jsonl) 2>> $OUT/table.err
  echo "table rc=$? after $(( $(date +%s) - t0 )) s"
fi
