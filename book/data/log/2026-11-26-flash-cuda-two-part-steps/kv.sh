#!/usr/bin/env bash
# flash_cuda's dK/dV pass with K/V fragments in registers and dS through stmatrix: GPU tests, then A/B against HEAD's
# kernels (.gpu/old) in alternating processes, then the Triton layout question.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r systems /tmp/old/ && cp .gpu/old/* /tmp/old/systems/attention/flash_cpp/
build='from systems.attention.flash_cpp import _build_cuda; print("build:", _build_cuda())'
t0=$(date +%s)
(cd /tmp && TORCH_EXTENSIONS_DIR=/tmp/ext_old PYTHONPATH=/tmp/site:/tmp/old python3 -c "$build" > $OUT/build_old.log 2>&1) &
TORCH_EXTENSIONS_DIR=/tmp/ext_new python3 -c "$build" > $OUT/build_new.log 2>&1
wait; echo "built in $(( $(date +%s) - t0 )) s"; tail -1 $OUT/build_old.log $OUT/build_new.log
TORCH_EXTENSIONS_DIR=/tmp/ext_new timeout 170 python3 -m pytest -m gpu tests/test_flash_cuda.py -q -p no:cacheprovider > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/pytest.log
for r in 0 1; do
  (cd /tmp && TORCH_EXTENSIONS_DIR=/tmp/ext_old PYTHONPATH=/tmp/site:/tmp/old timeout 75 python3 $OLDPWD/.gpu/ab.py old $r >> $OUT/ab.jsonl 2>>$OUT/ab.err)
  TORCH_EXTENSIONS_DIR=/tmp/ext_new timeout 75 python3 .gpu/ab.py new $r >> $OUT/ab.jsonl 2>>$OUT/ab.err
  echo "ab round $r after $(( $(date +%s) - t0 )) s"
done
echo "done after $(( $(date +%s) - t0 )) s"
