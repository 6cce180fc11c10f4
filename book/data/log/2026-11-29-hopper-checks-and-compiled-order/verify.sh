#!/usr/bin/env bash
# On one H200, from the repository's root (main as committed): the extension built; chapter 20's table of both
# passes; chapter 18's kernel breakdown of the 4-block step; then the Hopper GPU tests that had not run on this tree.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/r/machine.txt
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a $OUT/r/machine.txt
git log --oneline -1 2>/dev/null | tee -a $OUT/r/machine.txt
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/r/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/build.log)"
timeout 200 python3 .gpu/table.py $OUT/r/table.csv > $OUT/r/table.log 2>&1
echo "table rc=$? after $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m systems.bench.leaderboard_2026 kernels --layers 4 --attention flash_hopper \
  --recompute keep_attention > $OUT/r/kernels.log 2>&1
echo "kernels rc=$? after $(( $(date +%s) - t0 )) s"
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py tests/test_flash_bench.py \
  -q -p no:cacheprovider -rA -k "not forward_variants and not attention_matches" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
