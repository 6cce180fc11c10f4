#!/usr/bin/env bash
# On the GPU machine: the repository's tree (persistent backward, new backward rule) and .gpu/base (the commit before
# it), built side by side, then ab_final.py on each, alternating, while time is left; everything in one tar.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r .gpu/main && cp -r systems .gpu/main/
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())'
for t in base main; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/r/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s"
for rnd in 0 1 2; do
  for t in base main; do
    (( $(date +%s) - t0 > 330 )) && break 2
    (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD timeout 120 python3 ../../$(dirname $0)/ab_final.py $t $rnd >> $OUT/r/ab_final.jsonl 2>> $OUT/r/ab_final.err)
    echo "$t $rnd rc=$? after $(( $(date +%s) - t0 )) s"
  done
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
