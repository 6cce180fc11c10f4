#!/usr/bin/env bash
# One H200, from the repository's root: m = main (b029873), h1 = m with held_operands.diff (at head dim 64 each
# consumer of the dK/dV kernels holds its K in registers, the A operand of S^T = K Q^T: spills 64 to 128 bytes in the
# one-pass kernels), h2 = the same holding V too (dP^T = V dO^T; the one-pass kernels serialise their products, the
# two-pass ones compile clean), built side by side; ab_bwd.py one pass on m h1 h1 m, two passes on m h2 h2 m.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m h1 h2; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m one" "0 h1 one" "1 h1 one" "1 m one" "0 m two" "0 h2 two" "1 h2 two" "1 m two"; do
  set -- $turn
  [ $(( $(date +%s) - t0 )) -lt 250 ] || break
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
