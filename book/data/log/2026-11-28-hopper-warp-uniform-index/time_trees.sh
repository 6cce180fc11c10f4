#!/usr/bin/env bash
# On the GPU machine, after ../2026-11-28-hopper-backward-persistent/prepare_trees.sh and fwd_ab.py copied to .gpu/:
# build the three trees side by side, then the backward (ab64.py, probe_overhead.py) and the forward (fwd_ab.py) on
# each, alternating, two rounds. The GPU tests of a variant run in a call of their own (they take most of one).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; d=torch.device("cuda"); print("build:", unavailable(d), host())'
for t in base uniform persistent; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
for rnd in 0 1; do
  for t in base uniform persistent; do
    run() { (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout "$@"); }
    run 150 python3 ../ab64.py $t $rnd >> $OUT/ab.jsonl 2>> $OUT/ab.err
    run 100 python3 ../probe_overhead.py | sed "s/^{/{\"tree\": \"$t\", \"round\": $rnd, /" >> $OUT/probe.jsonl 2>> $OUT/probe.err
    run 100 python3 ../fwd_ab.py $t $rnd >> $OUT/fwd.jsonl 2>> $OUT/fwd.err
    echo "$t $rnd after $(( $(date +%s) - t0 )) s"
  done
done
