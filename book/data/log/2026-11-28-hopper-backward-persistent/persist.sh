#!/usr/bin/env bash
# Build the tree's extensions and the commit before's (.gpu/base) side by side; ab64.py alternating base and tree,
# two rounds; probe_overhead.py on both; the GPU tests of the Hopper kernels in the time left. As run in run 4; runs
# 2 and 3 ran smoke_persist.py on the tree after the build, and of the tests only
# -k "backward_matches or one_pass or takes_the_faster_backward". ab64.py is the one in
# ../2026-11-28-hopper-backward-d64-shares-summed/, copied to .gpu/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; d=torch.device("cuda"); print("build:", unavailable(d), host())'
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_base.log 2>&1) &
TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build.log 2>&1
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log) | base: $(tail -n1 $OUT/build_base.log)"
for rnd in 0 1; do
  (cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD timeout 150 python3 ../ab64.py base $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err)
  echo "base $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout 150 python3 .gpu/ab64.py new $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err
  echo "new $rnd rc=$? after $(( $(date +%s) - t0 )) s"
done
tail -3 $OUT/ab.err
(cd .gpu/base && TORCH_EXTENSIONS_DIR=/tmp/ext_base PYTHONPATH=/tmp/site:$PWD timeout 100 python3 ../probe_overhead.py > $OUT/probe_base.jsonl 2>/dev/null)
echo "probe base rc=$? after $(( $(date +%s) - t0 )) s"
TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD timeout 100 python3 .gpu/probe_overhead.py > $OUT/probe_new.jsonl 2>/dev/null
echo "probe new rc=$? after $(( $(date +%s) - t0 )) s"
export TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
