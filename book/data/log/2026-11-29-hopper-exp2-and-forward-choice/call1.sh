#!/usr/bin/env bash
# One H200, from the repository's root: trees .gpu/e0, e2, e4, e6 (FMA_GROUPS at head dim 64: 0, 2, 4, 6 of 16;
# at 128: 0, 2, 4, 0), built side by side; fwd_ab.py on each, twice, in turn.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in e0 e2 e4 e6; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 e0" "0 e2" "0 e4" "0 e6" "1 e6" "1 e4" "1 e2" "1 e0"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../fwd_ab.py $2 $1 >> $OUT/r/fwd_ab.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
