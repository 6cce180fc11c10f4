#!/usr/bin/env bash
# One H200, from the repository's root: m = main (13ade22) and a = m with alt_summer.diff (the two consumers take
# turns summing the dK/dV pass's dQ shares at head dim 64) built side by side; ab_bwd.py on each, alternating, two
# rounds; chapter 20's table (table.py) on m, forward and forward+backward, and on a, forward+backward; then the
# backward's GPU tests on a.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m a; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 a" "1 a" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 120 python3 ../ab_bwd.py $2 $1 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
for turn in "m fwd fwd_bwd" "a fwd_bwd"; do
  set -- $turn
  (cd .gpu/$1 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$1 PYTHONPATH=/tmp/site:$PWD && timeout 150 python3 ../table.py "$@" >> $OUT/r/table.jsonl) 2>> $OUT/r/table.err
  echo "table $1 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r1.tgz r
cd .gpu/a && export TORCH_EXTENSIONS_DIR=/tmp/ext_a PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=13ade22
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "backward_matches or cs336 or pass_pytorchs_checks or takes_one_pass" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
