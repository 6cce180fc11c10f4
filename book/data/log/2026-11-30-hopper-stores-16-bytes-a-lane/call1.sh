#!/usr/bin/env bash
# m = main (629fece), t = m with t.diff (the forward's timeline stamps): build both; timeline.py on t; sweep.py on m.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m t; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
(cd .gpu/t && export TORCH_EXTENSIONS_DIR=/tmp/ext_t PYTHONPATH=/tmp/site:$PWD && timeout 150 python3 ../timeline.py > $OUT/timeline.jsonl) 2> $OUT/timeline.err
echo "timeline rc=$? after $(( $(date +%s) - t0 )) s"
(cd .gpu/m && export TORCH_EXTENSIONS_DIR=/tmp/ext_m PYTHONPATH=/tmp/site:$PWD && timeout 240 python3 ../sweep.py m > $OUT/sweep.jsonl) 2> $OUT/sweep.err
echo "sweep rc=$? after $(( $(date +%s) - t0 )) s"
tail -c 3000 $OUT/timeline.err
