#!/usr/bin/env bash
# One H200, from the repository's root: m = main (8f977fa), k = m with one_pass_held_k.diff (the one pass holds K,
# dS^T from P^T's operand registers, D read after dP^T's wait), t2 = m with the two passes holding their A operands
# at head dim 64 (dK/dV: K and V; dQ: Q and dO), built side by side; ab_bwd.py one pass on m k k m, two passes on
# m t2 t2 m; then the backward's oracle cases of each tree's path and the CS336 attention tests on k.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m k t2; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m one" "0 k one" "1 k one" "1 m one" "0 m two" "0 t2 two" "1 t2 two" "1 m two"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
left() { echo $(( 560 - ($(date +%s) - t0) )); }
for t in k t2; do
  sel=$([ $t = k ] && echo "backward_matches and one-pass or takes_one_pass or cs336" || echo "backward_matches and two-pass or takes_one_pass")
  (cd .gpu/$t && SYSTEMS_GIT_COMMIT=8f977fa TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout $(left) python3 -m pytest \
    -m gpu ../../tests/test_flash_hopper_cuda.py -k "$sel" -v -p no:cacheprovider > $OUT/r/pytest_$t.log 2>&1)
  echo "pytest $t rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_$t.log)"
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r $OUT/r0.tgz
