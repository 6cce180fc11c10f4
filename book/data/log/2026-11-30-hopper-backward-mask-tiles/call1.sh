#!/usr/bin/env bash
# One H200, from the repository's root: m = main (052f535) and k = m with mask_tiles.diff (the backward's loops over
# tiles take the masked tiles apart from the rest) built side by side; ab_bwd.py one pass on each, alternating, two
# rounds, and its two passes one round each; then the backward's oracle cases (one pass and two), the one-pass tests
# and the CS336 attention tests on k.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m k; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m one" "0 k one" "1 k one" "1 m one" "0 m two" "0 k two"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 70 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
cd .gpu/k && export TORCH_EXTENSIONS_DIR=/tmp/ext_k PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=052f535
timeout $(( 540 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "backward_matches or takes_one_pass or cs336" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r $OUT/r0.tgz
