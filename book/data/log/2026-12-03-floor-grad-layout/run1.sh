set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/r/machine.txt
python3 -c "import torch, triton, platform; print(torch.__version__, triton.__version__, torch.version.cuda, platform.processor(), __import__('os').cpu_count())" >> $OUT/r/machine.txt
cat $OUT/r/machine.txt
t0=$(date +%s)
python3 -c "
import torch
from systems.attention.flash_cpp import hopper, cuda_unavailable
from systems.attention.flash_triton import host
print('hopper', hopper.unavailable(torch.device('cuda')), 'cuda', cuda_unavailable(torch.device('cuda')), 'host', host.unavailable())
" 2>&1 | tail -3
echo build $(( $(date +%s) - t0 )) s
for i in 1 2; do timeout -s KILL 150 python3 -m systems.bench.call_overhead > $OUT/r/co$i.txt 2> $OUT/r/co$i.err; echo co rc=$? $(( $(date +%s) - t0 )) s; done
timeout -s KILL 150 python3 book/data/log/2026-12-03-floor-grad-layout/floor_grad.py 7 > $OUT/r/floor_grad.jsonl 2> $OUT/r/floor_grad.err; echo floor rc=$? $(( $(date +%s) - t0 )) s
cat $OUT/r/floor_grad.jsonl | cut -c1-100
timeout 200 python3 -m pytest -o addopts="" -p no:cacheprovider -m gpu tests/test_flash_fastest.py tests/test_flash_hopper_cuda.py tests/test_fused.py tests/test_offload.py -v --durations=15 > $OUT/r/pytest1.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest1.log)"
paste <(cut -c1-130 $OUT/r/co1.txt) <(awk '{print $(NF-1)}' $OUT/r/co2.txt) | tail -40
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
tar czf $OUT/cache.tgz .gpu/ext
