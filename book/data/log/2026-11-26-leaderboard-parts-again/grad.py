# Does the fused loss's gradient get cloned into .grad on the GPU? Peak memory per phase, two ways of handing the
# gradients to autograd.
import sys, torch, systems.fused.cross_entropy as ce
GIB = 2**30
ptrs = {}
def attr_setup(ctx, inputs, output):
    ctx.wanted = inputs[7:9]; ctx.grads = list(output[1:])
def attr_backward(ctx, grad_loss, _a, _b):
    grads, ctx.grads = ctx.grads, None
    scaled = [g.mul_(grad_loss.to(g.dtype)) if w else None for g, w in zip(grads, ctx.wanted)]
    del grads
    ptrs['h'], ptrs['w'] = scaled[0].data_ptr(), scaled[1].data_ptr()
    return (*scaled, None, None, None, None, None, None, None)
orig_back = ce._scaled_gradients
def spy(ctx, g, a, b):
    out = orig_back(ctx, g, a, b); ptrs['h'], ptrs['w'] = out[0].data_ptr(), out[1].data_ptr(); return out
n, V, d = 65536, 151936, 4096
for way in ("saved tensors (now)", "ctx attributes"):
    if way.startswith("saved"):
        ce._loss_and_grads.register_autograd(spy, setup_context=ce._keep_gradients)
    else:
        ce._loss_and_grads.register_autograd(attr_backward, setup_context=attr_setup)
    h = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(V, d, device="cuda") / 64).bfloat16().requires_grad_()
    t = torch.randint(0, V, (n,), device="cuda")
    for _ in range(2):
        h.grad = w.grad = None
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
        loss = ce.linear_cross_entropy(h, w, t)
        torch.cuda.synchronize(); fwd_peak = torch.cuda.max_memory_allocated() - before; after_fwd = torch.cuda.memory_allocated() - before
        torch.cuda.reset_peak_memory_stats()
        loss.backward(); torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated() - before; after = torch.cuda.memory_allocated() - before
    print(f"{way}: forward peak {fwd_peak/GIB:.3f} GiB, after forward {after_fwd/GIB:.3f}, backward peak {bwd_peak/GIB:.3f}, "
          f"after {after/GIB:.3f}; grads stolen: h {h.grad.data_ptr() == ptrs['h']}, w {w.grad.data_ptr() == ptrs['w']}", flush=True)
    del h, w, t, loss; torch.cuda.empty_cache()
