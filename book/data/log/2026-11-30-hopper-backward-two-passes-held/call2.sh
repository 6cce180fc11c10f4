#!/usr/bin/env bash
# One H200, from the repository's root (the working tree: beaef18, tests included): m = main before it (8f977fa, under
# .gpu/m), h = beaef18 (under .gpu/h, for the timing), built side by side; ab_bwd.py two passes on m h h m; then every GPU
# test of test_flash_hopper_cuda.py on the working tree.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m h; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
(TORCH_EXTENSIONS_DIR=/tmp/ext_w PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_w.log 2>&1) &
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m two" "0 h two" "1 h two" "1 m two"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 90 python3 ../ab_bwd.py $2 $1 $3 >> $OUT/r/ab_bwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 $3 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
SYSTEMS_GIT_COMMIT=beaef18 TORCH_EXTENSIONS_DIR=/tmp/ext_w PYTHONPATH=/tmp/site:$PWD timeout $(( 570 - ($(date +%s) - t0) )) python3 -m pytest -m gpu \
  tests/test_flash_hopper_cuda.py -v --durations=10 -p no:cacheprovider > $OUT/r/pytest_h.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_h.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r $OUT/r0.tgz
