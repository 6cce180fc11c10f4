#!/usr/bin/env bash
# One H200, from the repository's root: m = main and n = the change (L and D read early without the mask, a fourth
# stage at head dim 64 without it) built side by side; ab_nc.py on each, alternating, two rounds; then the
# backward's GPU tests on n.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m n; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 n" "1 n" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 90 python3 ../ab_nc.py $2 $1 >> $OUT/r/ab_nc.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
cd .gpu/n && export TORCH_EXTENSIONS_DIR=/tmp/ext_n PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=984c250
timeout $(( 365 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "backward_matches or cs336 or pass_pytorchs_checks or takes_one_pass" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
