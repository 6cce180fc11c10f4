#!/usr/bin/env bash
# m = main (629fece), n = m with n.diff (O, dK, dV and dQ stored 16 bytes a lane): build both; sweep.py on m n n m.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m n; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for t in m n n m; do
  if (( $(date +%s) - t0 > 480 )); then echo "skipped $t"; continue; fi
  (cd .gpu/$t && export TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../sweep.py $t >> $OUT/sweep.jsonl) 2>> $OUT/sweep.err
  echo "sweep $t rc=$? after $(( $(date +%s) - t0 )) s"
done
