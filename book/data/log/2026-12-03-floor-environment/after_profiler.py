"""Whether a torch.profiler session slows the host-bound steps that run after it. The eager step of SIZE at CONTEXT
(8,192 tokens a batch, bf16) with the attentions named, interleaved on one model (attention_steps.interleaved),
before and after device_busy (which profiles a step) has run for each attention in ORDER; then once more. One JSON
line per phase and attention: median step ms and every step's time. Run at d1fdff5: device_busy has since given
way to kernel_times, which profiles without timing the step."""
import json
import sys

from systems.bench.attention_steps import device_busy, interleaved
from systems.bench.flash_sweep import _step_config
from systems.bench.e2e import vary

size, context, order = sys.argv[1], int(sys.argv[2]), tuple(sys.argv[3].split(","))
cfg = _step_config(size, context, 8192, "bf16", 3, 20)


def phase(name):
    for row in interleaved(cfg, order).to_dict(orient="records"):
        print(json.dumps({"phase": name, **row}), flush=True)


phase("before any profiler")
phase("again, before any profiler")
for attention in order:
    run = device_busy(vary(cfg, attention=attention))
    print(json.dumps({"phase": f"device_busy {attention}", "attention": attention, "step_ms": run["step_ms"],
                      "kernel_ms": run["kernel_ms"]}), flush=True)
phase("after profiling")
