set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
D=book/data/log/2026-12-03-floor-environment
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/r/machine.txt
nproc >> $OUT/r/machine.txt; cat $OUT/r/machine.txt
t0=$(date +%s)
timeout -s KILL 150 python3 $D/compile_control.py 7 > $OUT/r/compile_control.jsonl 2> $OUT/r/compile_control.err; echo control rc=$? $(( $(date +%s) - t0 )) s
python3 -c "
import json
for l in open('$OUT/r/compile_control.jsonl'):
    r = json.loads(l); print(f\"{r['phase'][:34]:34s} {r['impl']:13s} wall {r['wall_us']:7.1f}  threads {r['threads']} children {r['children']} objects {r['gc_objects']}\")
"
for order in sdpa,flash flash,sdpa; do
timeout -s KILL 150 python3 $D/after_profiler.py small 1024 $order > $OUT/r/after_profiler_$order.jsonl 2> $OUT/r/after_profiler_$order.err; echo profiler $order rc=$? $(( $(date +%s) - t0 )) s
python3 -c "
import json
for l in open('$OUT/r/after_profiler_$order.jsonl'):
    r = json.loads(l); print(f\"{r['phase'][:28]:28s} {r['attention']:6s} step {r['step_ms']:7.2f}\", r.get('kernel_ms', ''))
"
done
timeout -s KILL 200 python3 -m systems.bench.call_overhead --floor > $OUT/r/floor.txt 2> $OUT/r/floor.err; echo floor rc=$? $(( $(date +%s) - t0 )) s
cat $OUT/r/floor.txt
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
