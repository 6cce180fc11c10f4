#!/usr/bin/env bash
# One H200, from the repository's root: m = main (78a861d) and e = m with first_tile.diff (at head dim 128, causal,
# consumer 1 of the dK/dV kernel issues no products for its first query tile, which ends before its first key)
# built side by side; ab_bwd.py on each, alternating, two rounds; then the backward's oracle cases (one pass and
# two), the one-pass tests and the CS336 attention tests on e.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m e; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 e" "1 e" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_bwd.py $2 $1 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
cd .gpu/e && export TORCH_EXTENSIONS_DIR=/tmp/ext_e PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=78a861d
timeout $(( 400 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "backward_matches or takes_one_pass or cs336" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r $OUT/r0.tgz
