"""The per-call floor of an attention call: where the time of a call too small to keep the GPU busy goes.

At one head of 128 tokens the kernels have almost nothing to do, so a call costs what the host spends
issuing it. :func:`call_overhead` times calls back to back, layer by layer of our forward's call path from Python
(the checks, one kernel launch through Triton's JIT with fixed and with autotuned tiles, the allocation and the
remembered launch a later call makes, the custom op, the autograd function) and the backward's launches; then
each C++ operator pair of ours alone, forward and backward, where it runs (the Triton kernels' host path, the CUDA
C++ kernels', the Hopper kernels'); a Python autograd function that does nothing; SDPA's own FlashAttention-2
kernels inside a Python autograd function (what autograd through Python costs a C++ kernel path); then whole calls
of ours (the Triton kernels from C++ and from Python, ``flash``, ``flash_cuda``) and of the SDPA back ends, each
also with its backward on the calling thread instead of autograd's device thread. :func:`call_floor` times whole
calls eager, compiled and replayed from a CUDA graph.

    python -m systems.bench.call_overhead [--floor]
"""

from __future__ import annotations

import argparse
from typing import Callable

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from systems.attention import unavailable
from systems.attention._checks import check_attention_inputs
from systems.attention.flash_cpp import cuda_unsupported
from systems.attention.peers import Unavailable, refused
from systems.bench.flash_sweep import TENSOR_DTYPES, UNSUPPORTED, attention
from systems.cli import integer
from systems.device import timed
from systems.triton_interpreter import triton_unavailable


class _Nothing(torch.autograd.Function):
    """A Python autograd function that returns its input: what autograd's Python layer alone costs per call."""

    @staticmethod
    def forward(ctx, q):
        return q.view_as(q)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _SdpaFlashInPython(torch.autograd.Function):
    """SDPA's FlashAttention-2 kernels (the aten operators behind its flash back end) inside a Python autograd
    function: what a C++ kernel path costs per call once its autograd goes through Python, as ours does."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal):
        if q.device.type != "cuda":
            raise Unavailable("SDPA's FlashAttention-2 kernels need a GPU")
        if q.dtype not in (torch.float16, torch.bfloat16):
            raise Unavailable(f"SDPA's FlashAttention-2 kernels take fp16 and bf16, not {q.dtype}")
        o, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, is_causal)
        ctx.save_for_backward(q, k, v, o, lse, seed, offset)
        ctx.lengths, ctx.is_causal = (cum_q, cum_k, max_q, max_k), is_causal
        return o

    @staticmethod
    def backward(ctx, grad):
        q, k, v, o, lse, seed, offset = ctx.saved_tensors
        grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, o, lse, *ctx.lengths, 0.0, ctx.is_causal, seed, offset)
        return *grads, None


ON_CALLING_THREAD = "forward + backward, backward on the calling thread"


def on_calling_thread(step: Callable) -> Callable:
    """``step`` with autograd's multithreading off: the backward runs on the thread that calls ``backward()``
    instead of being handed to autograd's device thread and back (what a Python backward pays for that hand-off)."""
    def run():
        with torch.autograd.set_multithreading_enabled(False):
            step()
    return run


def per_call_us(fn: Callable, n_calls: int, device: torch.device, repeats: int = 5) -> tuple[float, float]:
    """µs per call of ``fn`` called back to back: host time to issue the calls, wall time until the device is done.
    The median over ``repeats`` blocks of ``n_calls``: a host-bound call's time moves with what else the host does."""
    fn()  # compiled, tuned and allocated before the clock starts
    blocks = []
    for _ in range(repeats):
        with timed(device) as wall:
            with timed(device, sync_start=False, sync_end=False) as host:
                for _ in range(n_calls):
                    fn()
        blocks.append((host.ms / n_calls * 1e3, wall.ms / n_calls * 1e3))
    return tuple(float(x) for x in np.median(np.array(blocks), axis=0))


def call_overhead(shape=(1, 1, 128, 64), dtype: str = "bf16", *, n_calls: int = 300, is_causal: bool = True,
                  peers=("sdpa_flash", "sdpa_cudnn")) -> pd.DataFrame:
    """One row per layer of our call path and per whole call of ours and the ``peers``: ``host_us`` is the time
    the host needs to issue one call, ``wall_us`` the time per call until the device has finished them all.
    Where the two agree, the host (Python, dispatch, kernel launches) sets the pace, not the kernels."""
    from systems.attention.flash_triton import launch, ops
    from systems.attention.flash_triton.tiles import FlashConfig

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    q, k, v = (torch.randn(*shape, device=device, dtype=TENSOR_DTYPES[dtype], requires_grad=True) for _ in "qkv")
    do = torch.randn_like(q)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    o, L = torch.empty_like(qd), torch.empty(shape[:-1], device=device, dtype=torch.float32)
    do_d = do.detach()
    tuned, untuned = FlashConfig(), FlashConfig(autotune=False)
    code = tuned.encode()

    def backward_of(attend):
        def step():
            q.grad = k.grad = v.grad = None
            attend(q, k, v, is_causal).backward(do)
        return step

    ours, ours_python = attention("flash_triton"), attention("flash_triton_python")
    steps = {
        ("flash_triton", "input checks (Python)"): lambda: check_attention_inputs(q, k, v),
        ("flash_triton", "forward kernel launch through Triton's JIT, fixed tiles"):
            lambda: launch.launch_forward(qd, kd, vd, o, L, is_causal, untuned),
        ("flash_triton", "forward kernel launch through Triton's JIT, tiles of the shape"):
            lambda: launch.launch_forward(qd, kd, vd, o, L, is_causal, tuned),
        ("flash_triton", "forward, allocation + remembered launch"):
            lambda: launch.forward(qd, kd, vd, is_causal, tuned),
        ("flash_triton", "the same through the custom op"): lambda: ops.flash_fwd(qd, kd, vd, is_causal, code),
        ("flash_triton", "forward (autograd.Function)"): lambda: ours_python(q, k, v, is_causal),
        ("flash_triton", "backward, allocations + remembered launches"):
            lambda: launch.backward(qd, kd, vd, o, do_d, L, is_causal, tuned),
        ("flash_triton_python", "forward + backward"): backward_of(ours_python),
        **_operator_steps(qd, kd, vd, do_d, is_causal),
        ("flash_triton", "forward, the public function (from C++ on a GPU)"): lambda: ours(q, k, v, is_causal),
        ("flash_triton", "forward + backward"): backward_of(ours),
        **{(impl, "forward + backward"): backward_of(_refusing(_unavailable(impl, q), attention(impl)))
           for impl in ("flash", "flash_cuda")},
        ("autograd.Function doing nothing", "forward + backward"): backward_of(lambda q, k, v, c: _Nothing.apply(q)),
        ("SDPA flash kernels in a Python autograd.Function", "forward + backward"):
            backward_of(_SdpaFlashInPython.apply),
    }
    for name in peers:
        steps[(name, "forward")] = lambda attend=attention(name): attend(q, k, v, is_causal)
        steps[(name, "forward + backward")] = backward_of(attention(name))
    for (impl, what), fn in list(steps.items()):
        if what == "forward + backward":
            steps[(impl, ON_CALLING_THREAD)] = on_calling_thread(fn)
    rows = []
    for (impl, what), fn in tqdm(steps.items(), desc="per-call cost"):
        try:
            host, wall = per_call_us(fn, n_calls, device)
        except RuntimeError as exc:
            if not refused(exc):
                raise
            host = wall = UNSUPPORTED
        rows.append({"impl": impl, "what": what, "host_us": host, "wall_us": wall})
    return pd.DataFrame(rows)


# Each C++ operator pair of ours (the ops in ``torch.ops.systems_flash`` below its autograd node) and the words of
# its two rows: the Triton kernels' host path launches the kernels a first call's plan remembered
_LAUNCHING = ("forward, C++ operator (allocations + launches)", "backward, C++ operator (allocations + launches)")
OPERATORS = {
    "flash_triton": ("triton_forward", "triton_backward", "forward, C++ operator (allocation + remembered launch)",
                     "backward, C++ operator (allocations + remembered launches)"),
    "flash_cuda": ("forward", "backward", *_LAUNCHING),
    "flash_hopper": ("hopper_attention_forward", "hopper_attention_backward", *_LAUNCHING),
}


def _unavailable(impl: str, q: torch.Tensor) -> str | None:
    """Why ``impl`` cannot take ``q`` here, or None; for ``flash_hopper`` also inputs its kernels do not take (the
    name sends those to the Triton kernels, whose operators are timed as theirs)."""
    why = unavailable(impl, q.device, q.dtype, q.shape[-1])
    if why is None and impl == "flash_hopper":
        from systems.attention.flash_cpp.hopper import HEAD_DIMS

        why = cuda_unsupported(q.dtype, q.shape[-1], HEAD_DIMS)
    return why


def _refusing(why: str | None, attend: Callable) -> Callable:
    """``attend``, or where it cannot run (``why``) a stand-in that says so as PyTorch's back ends refuse."""
    if why is None:
        return attend

    def refuse(*args):
        raise Unavailable(why)
    return refuse


def _operator_steps(q, k, v, do, is_causal: bool) -> dict[tuple[str, str], Callable]:
    """Each C++ operator pair of ours alone, forward and backward (no autograd), where it runs (on a GPU where it
    builds and takes these inputs)."""
    if q.device.type != "cuda":
        return {}
    from systems.attention.flash_triton import host

    steps = {}
    for impl, (forward_op, backward_op, forward_words, backward_words) in OPERATORS.items():
        if (host.unavailable() if impl == "flash_triton" else _unavailable(impl, q)):
            continue
        forward, backward = getattr(torch.ops.systems_flash, forward_op), getattr(torch.ops.systems_flash, backward_op)
        o, L = forward(q, k, v, is_causal)
        steps[(impl, forward_words)] = lambda forward=forward: forward(q, k, v, is_causal)
        steps[(impl, backward_words)] = lambda backward=backward, o=o, L=L: backward(q, k, v, o, do, L, is_causal)
    return steps


def graphed(step: Callable) -> Callable:
    """``step`` captured once in a CUDA graph (``torch.cuda.graph``); the callable returned replays it, so no
    Python runs per call: what is left is the kernels and their launch gaps on the GPU."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # tuning, compiling and the allocator's first requests stay outside the capture
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def call_floor(shape=(1, 1, 128, 64), dtype: str = "bf16", *, n_calls: int = 300, rounds: int = 5,
               is_causal: bool = True,
               impls=("flash", "flash_triton", "flash_triton_python", "flash_cuda", "sdpa_flash", "sdpa_cudnn"),
               modes=("eager", "compiled", "CUDA graph")
               ) -> pd.DataFrame:
    """Wall µs per forward and backward call at a shape too small to keep the GPU busy: eager, under
    ``torch.compile`` (the attention compiled, its backward run by autograd) and captured whole in a CUDA graph
    and replayed (:func:`graphed`): how much of the floor each way of calling removes, ours next to SDPA's.

    The backward takes a gradient of the output's shape, as a model's backward hands it to attention. That of
    ``o.sum()`` is a scalar expanded over the output (every stride 0): the operators of our CUDA C++ and Hopper
    kernels copy it before their kernels, the Triton kernels read it in place, and the floor would time that copy,
    which a model never pays.

    The ways of calling take turns, eager first, before anything in the process is compiled or captured, as in an
    eager training loop; each is made ready (compiled, tuned, captured) just before its own rounds. Within a way of
    calling, ``rounds`` rounds time a block of ``n_calls`` of each implementation in turn, and the table has each
    one's median block: a host-bound floor drifts with the machine by more than the implementations differ, so they
    are timed side by side in time rather than one after another."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    q, k, v = (torch.randn(*shape, device=device, dtype=TENSOR_DTYPES[dtype], requires_grad=True) for _ in "qkv")
    do = torch.randn_like(q)
    why_not = {impl: unavailable(impl, device, q.dtype, shape[-1]) for impl in impls}  # once per implementation
    torch._dynamo.reset()
    walls = {}
    for mode in tqdm(modes, desc="per-call floor"):
        ready = {}
        for impl in impls:
            attend = torch.compile(attention(impl)) if mode == "compiled" else attention(impl)

            def step(attend=attend):
                # gradients returned, not accumulated into .grad: a captured step must not read the previous one's
                torch.autograd.grad(attend(q, k, v, is_causal), (q, k, v), do)

            try:
                if why_not[impl]:
                    raise Unavailable(f"{impl} {why_not[impl]}")
                fn = graphed(step) if mode == "CUDA graph" else step
                for _ in range(3):  # compile, tune
                    fn()
                ready[impl] = fn
            except RuntimeError as exc:
                if not refused(exc):
                    raise
                walls[impl, mode] = UNSUPPORTED
        blocks = {impl: [] for impl in ready}
        for _ in range(rounds):
            for impl, fn in ready.items():
                blocks[impl].append(per_call_us(fn, n_calls, device, repeats=1)[1])
        walls.update({(impl, mode): float(np.median(times)) for impl, times in blocks.items()})
    rows = [{"impl": impl, "mode": mode, "wall_us": wall} for (impl, mode), wall in walls.items()]
    table = pd.DataFrame(rows).pivot(index="impl", columns="mode", values="wall_us").reindex(impls)[list(modes)]
    return table.reset_index()


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(prog="python -m systems.bench.call_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--floor", action="store_true",
                   help="whole calls eager, compiled and from a CUDA graph (call_floor), not the call path's layers")
    p.add_argument("--calls", type=integer(1), default=300, help="calls timed back to back for each row")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if why := triton_unavailable(device, torch.float32):
        p.error(f"our Triton kernels, whose calls this times, cannot run here: {why}")
    if args.floor and device.type != "cuda":
        p.error("the per-call floor replays CUDA graphs: it needs a CUDA GPU")
    dtype = "bf16" if device.type == "cuda" else "fp32"  # Triton's interpreter has no bf16
    times = call_floor if args.floor else call_overhead
    table = times(dtype=dtype, n_calls=args.calls)
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
