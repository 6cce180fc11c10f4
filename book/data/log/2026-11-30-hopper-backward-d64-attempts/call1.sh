#!/usr/bin/env bash
# One H200, from the repository's root: m = main (4c5094b), e3 = m with rows_early.diff (the dK/dV kernels read L and
# D before their waits in every tile without the mask, causal too), e4 = e3 with four_stages.diff (four ring stages
# at head dim 64 causal too), built side by side; ab_bwd.py one pass on each in turn (m e3 e4 e4 e3 m), then the two
# passes on m and e3.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m e3 e4; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m one" "0 e3 one" "0 e4 one" "1 e4 one" "1 e3 one" "1 m one" "0 m two" "0 e3 two"; do
  set -- $turn
  [ $(( $(date +%s) - t0 )) -lt 520 ] || break
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 70 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
