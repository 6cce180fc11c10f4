#!/usr/bin/env bash
# One H200, from the repository's root: three trees built side by side (m = main; ld3 = each tile's L read before
# S^T's wait and D before dP^T's, three stages as main; d3 = D alone read early); ab_bwd.py on each, alternating,
# two rounds (the order reversed in the second); then the backward's GPU tests on ld3.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m ld3 d3; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 ld3" "0 d3" "1 d3" "1 ld3" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../ab_bwd.py $2 $1 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
cd .gpu/ld3 && export TORCH_EXTENSIONS_DIR=/tmp/ext_ld3 PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=984c250
timeout $(( 580 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "backward or cs336 or model or compiled or pass_pytorchs_checks" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
