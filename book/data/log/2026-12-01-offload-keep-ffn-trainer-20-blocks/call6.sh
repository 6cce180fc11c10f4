#!/usr/bin/env bash
# plain PyTorch's recipe at 20 blocks in an H100 80GB's memory (hold.py holding the rest), as call 4 ran ours
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
python3 .gpu/hold.py > $OUT/r/run6_hold.txt 2>&1 &
sleep 15; cat $OUT/r/run6_hold.txt
timeout 400 python3 .gpu/depth.py plain 20 > $OUT/r/run6_plain20.json 2> $OUT/r/run6_plain20.err
echo "plain20 rc=$? after $(( $(date +%s) - t0 )) s"; grep -E '"(status|ms|mfu|peak_gib|extra_gib)"' $OUT/r/run6_plain20.json
kill %1
cd $OUT && tar czf run6.tgz r && rm -rf r
