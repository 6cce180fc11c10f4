#!/usr/bin/env bash
# On the GPU machine, after prepare_trees.sh: build the three trees side by side, then ab64.py and
# probe_overhead.py on each, alternating, two rounds; then the Hopper GPU tests on the trees that are not base.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; d=torch.device("cuda"); print("build:", unavailable(d), host())'
for t in base uniform persistent; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for rnd in 0 1; do
  for t in base uniform persistent; do
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 150 python3 ../ab64.py $t $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err)
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../probe_overhead.py | sed "s/^{/{\"tree\": \"$t\", \"round\": $rnd, /" >> $OUT/probe.jsonl 2>> $OUT/probe.err)
    echo "$t $rnd after $(( $(date +%s) - t0 )) s"
  done
done
for t in uniform persistent; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 300 python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider > $OUT/pytest_$t.log 2>&1)
  echo "pytest $t rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest_$t.log)"
done
