#!/usr/bin/env bash
# flash_cuda A/B/C: HEAD's kernels (.gpu/old), variants under .gpu/variants/NAME (overlaid on HEAD's), and the working
# tree ("new"): built side by side, GPU tests of each candidate, then timed in alternating processes.
set -u
REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
build='from systems.attention.flash_cpp import _build_cuda; print("build:", _build_cuda())'
VARIANTS=$(ls .gpu/variants 2>/dev/null)
t0=$(date +%s)
for tree in old $VARIANTS; do
  rm -rf /tmp/$tree && mkdir -p /tmp/$tree && cp -r systems tests pyproject.toml /tmp/$tree/ && cp .gpu/old/* /tmp/$tree/systems/attention/flash_cpp/
  [ "$tree" != old ] && cp .gpu/variants/$tree/* /tmp/$tree/systems/attention/flash_cpp/
  (cd /tmp && TORCH_EXTENSIONS_DIR=/tmp/ext_$tree PYTHONPATH=/tmp/site:/tmp/$tree python3 -c "$build" > $OUT/build_$tree.log 2>&1) &
done
TORCH_EXTENSIONS_DIR=/tmp/ext_new python3 -c "$build" > $OUT/build_new.log 2>&1
wait; echo "built in $(( $(date +%s) - t0 )) s"; tail -qn1 $OUT/build_*.log
for tree in $VARIANTS new; do
  root=/tmp/$tree; [ $tree = new ] && root=$PWD
  (cd $root && TORCH_EXTENSIONS_DIR=/tmp/ext_$tree PYTHONPATH=/tmp/site:$root timeout 170 python3 -m pytest -m gpu tests/test_flash_cuda.py -q -p no:cacheprovider > $OUT/pytest_$tree.log 2>&1)
  echo "pytest $tree rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest_$tree.log)"
done
for r in 0 1; do
  for tree in old $VARIANTS new; do
    root=/tmp/$tree; [ $tree = new ] && root=$PWD
    (cd /tmp && TORCH_EXTENSIONS_DIR=/tmp/ext_$tree PYTHONPATH=/tmp/site:$root timeout 75 python3 $REPO/.gpu/ab.py $tree $r >> $OUT/ab.jsonl 2>>$OUT/ab.err)
  done
  echo "ab round $r after $(( $(date +%s) - t0 )) s"
done
