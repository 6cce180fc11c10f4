set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
mkdir -p $OUT/r
t0=$(date +%s)
timeout 560 python3 -m pytest -o addopts="" -p no:cacheprovider -m gpu tests/test_flash_triton.py tests/test_flash_cuda.py tests/test_flash_triton_host.py \
  tests/test_flash_hopper.py tests/test_memory.py tests/test_flash_pytorch.py tests/test_harness.py tests/test_flash_bench.py \
  -v --durations=15 > $OUT/r/pytest2.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest2.log)"
grep -E 'FAILED|ERROR' $OUT/r/pytest2.log | head
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
