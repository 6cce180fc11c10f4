#!/usr/bin/env bash
# One H200, from the repository's root: m = main (78a861d) and h = m with half_tile.diff (a consumer's last key tile
# halved in the Hopper forward where its queries see no key past the tile's first half) built side by side;
# ab_fwd.py on each, alternating, two rounds; chapter 20's table (table.py) on h, forward and forward+backward.
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
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/r/build_*.log | tr '\n' ' ')"
for turn in "0 m" "0 h" "1 h" "1 m"; do
  set -- $turn
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 120 python3 ../ab_fwd.py $2 $1 >> $OUT/r/ab_fwd.jsonl) 2>> $OUT/r/ab.err
  echo "round $1 $2 after $(( $(date +%s) - t0 )) s"
done
tar -C $OUT -czf $OUT/r0.tgz r
(cd .gpu/h && export TORCH_EXTENSIONS_DIR=/tmp/ext_h PYTHONPATH=/tmp/site:$PWD && timeout 200 python3 ../table.py h fwd fwd_bwd >> $OUT/r/table.jsonl) 2>> $OUT/r/table.err
echo "table after $(( $(date +%s) - t0 )) s"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r $OUT/r0.tgz
