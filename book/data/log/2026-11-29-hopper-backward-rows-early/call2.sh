#!/usr/bin/env bash
# One H200, from the repository's root: four trees built side by side (m = main; s4 = a fourth stage in the dK/dV
# ring at head dim 64; s4l = s4 and each tile's L read before S^T's wait; s4ld = s4l and D read before dP^T's wait);
# then ab_bwd.py on each, alternating, two rounds (the order reversed in the second).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m s4 s4l s4ld; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 s4" "0 s4l" "0 s4ld" "1 s4ld" "1 s4l" "1 s4" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../ab_bwd.py $2 $1 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
