#!/usr/bin/env bash
# the stopped backward's copy, probed at 98bca8e's offload and this tree's; then the leaderboard's 20-block step with
# our offloading recipe in an H100 80GB's memory (hold.py holding the rest)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/run4_machine.txt
mkdir -p /tmp/old && cp -r systems /tmp/old/ && cp .gpu/offload_98bca8e.py /tmp/old/systems/offload.py
(echo "== 98bca8e"; PYTHONPATH=/tmp/site python3 .gpu/race_probe.py /tmp/old 2>&1 | grep -v "^W1"
 echo "== this tree"; PYTHONPATH=/tmp/site python3 .gpu/race_probe.py $PWD 2>&1 | grep -v "^W1") > $OUT/r/run4_probe.txt
cat $OUT/r/run4_probe.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/r/run4_build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/run4_build.log)"
python3 .gpu/hold.py > $OUT/r/run4_hold.txt 2>&1 &
sleep 15; cat $OUT/r/run4_hold.txt
timeout $(( 540 - ($(date +%s) - t0) )) python3 .gpu/depth.py ours 20 > $OUT/r/run4_ours20.json 2> $OUT/r/run4_ours20.err
echo "ours20 rc=$? after $(( $(date +%s) - t0 )) s"; cat $OUT/r/run4_ours20.json | head -40
kill %1
cd $OUT && tar czf run4.tgz r && rm -rf r
