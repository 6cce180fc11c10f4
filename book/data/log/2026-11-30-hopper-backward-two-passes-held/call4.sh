#!/usr/bin/env bash
# One H200, from the repository's root: m = main (0be7826, under .gpu/m) and pp = m with pingpong.diff (the one pass's
# consumers take turns at issuing their products at head dim 64, named barriers 4 and 5), built side by side;
# ab_bwd.py one pass on m pp pp m, its rows written straight under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m pp; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for turn in "0 m one" "0 pp one" "1 pp one" "1 m one"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/ab_bwd.jsonl) 2>> $OUT/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
