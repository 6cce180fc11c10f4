"""recompute="offload" (systems.offload): the same loss and gradients as the model without checkpointing; what each
group moves to host memory, counted tensor by tensor; a sequence length that changes, and no gradients; each group
brought back while the backward of the group after it runs; under FSDP2 (two processes, gloo), the gradients of
the unsharded model over both ranks' data, and on one GPU those of the model without checkpointing; checkpointing it
does not run refused; a backward stopped by an error.
On a CPU the copies stay in host memory; the GPU tests move them across."""

from dataclasses import replace

import pytest
import torch
from torch._dynamo.utils import counters

from systems.dist import launch
from systems.model import LEADERBOARD_2026, TransformerLM
from systems.offload import ActivationOffload, run_groups_keeping_ffn

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TOY = replace(LEADERBOARD_2026, num_layers=3, vocab_size=256, context_length=32, d_model=64, d_ff=176, num_heads=4,
              attention="sdpa")


def _loss_and_grads(model: TransformerLM, tokens: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(tokens, tokens.roll(1, dims=1))
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def _pair(cfg, dtype, device, recompute="offload", **options):
    torch.seed()  # fresh weights, the same in both
    state = TransformerLM(cfg).to(device, dtype).state_dict()
    plain, moving = TransformerLM(cfg), TransformerLM(cfg, recompute=recompute, **options)
    for model in (plain, moving):
        model.load_state_dict(state)
        model.to(device, dtype)
    return plain, moving


def _assert_same_step(plain, moving, tokens):
    expected, expected_grads = _loss_and_grads(plain, tokens)
    loss, grads = _loss_and_grads(moving, tokens)
    # the norms compute in float32 (RMSNorm), compiled and eager round differently there
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-5, atol=1e-6 * expected_grads[name].abs().max(),
                                   msg=lambda m, name=name: f"{name}: {m}")


def _moved_per_group(cfg, tokens_n: int, itemsize: int, group_blocks: int) -> int:
    """What a group but the last moves: its input, and per block attention's output, W1 x and W3 x."""
    return itemsize * tokens_n * (cfg.d_model * (1 + group_blocks) + 2 * group_blocks * cfg.d_ff)


@pytest.mark.parametrize("layers, group_blocks", [(3, 1), (4, 2)])
def test_offload_gives_the_loss_and_gradients_of_the_model_without_checkpointing(layers, group_blocks):
    cfg = replace(TOY, num_layers=layers)
    plain, moving = _pair(cfg, torch.float64, "cpu", checkpoint_blocks=group_blocks)
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.context_length))
    torch._dynamo.reset()
    counters.clear()
    _assert_same_step(plain, moving, tokens)
    assert counters["stats"]["unique_graphs"] == 1  # one compiled graph serves every group
    per_group = _moved_per_group(cfg, tokens.numel(), torch.finfo(torch.float64).bits // 8, group_blocks)
    groups = -(-layers // group_blocks)
    assert moving.offload.moved_bytes == {g: per_group if g < groups - 1 else 0 for g in range(groups)}


def test_offload_follows_a_sequence_length_that_changes_and_moves_nothing_without_gradients():
    plain, moving = _pair(TOY, torch.float64, "cpu", checkpoint_blocks=1)
    torch._dynamo.reset()
    counters.clear()
    for length in (TOY.context_length, 24, 17):
        _assert_same_step(plain, moving, torch.randint(0, TOY.vocab_size, (2, length)))
        assert all(moving.offload.moved_bytes[g] > 0 for g in range(TOY.num_layers - 1)), length
    assert counters["stats"]["unique_graphs"] == 2  # the second length compiles a graph for every length after it
    moved, packed = moving.offload.moved_bytes, []
    moving.offload._pack = packed.append
    with torch.no_grad():  # nothing is saved for a backward that will not come
        tokens = torch.randint(0, TOY.vocab_size, (2, TOY.context_length))
        torch.testing.assert_close(moving(tokens, tokens), plain(tokens, tokens), rtol=1e-6, atol=0)
    assert packed == [] and moving.offload.moved_bytes is moved


def test_keeping_the_ffn_on_the_gpu_keeps_what_offload_moves_and_gives_the_same_gradients():
    plain, keeping = _pair(TOY, torch.float64, "cpu", recompute="keep_attention_and_ffn", checkpoint_blocks=1)
    _assert_same_step(plain, keeping, torch.randint(0, TOY.vocab_size, (2, TOY.context_length)))
    assert keeping.offload.moved_bytes == {}  # nothing went through the hooks
    x = torch.randn(2, TOY.context_length, TOY.d_model, dtype=torch.float64, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        run_groups_keeping_ffn(keeping.layers, x, 1, None)
    saved = [t.numel() for t in saved if not isinstance(t, torch.nn.Parameter)]
    # per block: its input, attention's output, W1 x and W3 x, as offload moves them (test above)
    tokens = x.numel() // TOY.d_model
    assert sum(n for n in saved if n >= x.numel()) == TOY.num_layers * tokens * (2 * TOY.d_model + 2 * TOY.d_ff)


def test_offload_brings_each_group_back_while_the_backward_of_the_next_runs(monkeypatch):
    cfg = replace(TOY, num_layers=4)
    model = TransformerLM(cfg, checkpoint_blocks=1, recompute="offload")
    order = []
    load, unpack = ActivationOffload._load, ActivationOffload._unpack
    monkeypatch.setattr(ActivationOffload, "_load", lambda self, e: (order.append(("load", e.group)), load(self, e)))
    monkeypatch.setattr(ActivationOffload, "_unpack",
                        lambda self, e: (order.append(("unpack", e.group)), unpack(self, e))[1])
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.context_length))
    model(tokens, tokens).backward()
    first = {event: order.index(event) for event in dict.fromkeys(order)}
    for g in range(3):  # groups 0 to 2 moved; group 3 kept
        assert first[("unpack", g + 1)] < first[("load", g)] < first[("unpack", g)], order
    assert ("load", 3) not in first


def _fsdp2_against_plain(cfg, recompute: str, to, batches, rank: int, world: int) -> dict:
    """Two steps of the model keeping the feed-forward's products with ``recompute``, its blocks FSDP2's units,
    against the unsharded model without checkpointing over every rank's tokens (the mean of their losses'
    gradients): both losses of this rank's tokens, the largest difference of a gradient over that gradient's largest
    value, the graphs compiled and what each group moved. ``to`` puts a model on its device and dtype,
    ``batches(step)`` gives every rank's tokens of a step."""
    from systems.fsdp.torch_fsdp import TorchFSDP

    plain = to(TransformerLM(cfg))
    sharded = to(TransformerLM(cfg, checkpoint_blocks=1, recompute=recompute))
    sharded.load_state_dict(plain.state_dict())
    wrapped = TorchFSDP(sharded)
    torch._dynamo.reset()
    counters.clear()
    worst, losses = 0.0, []
    for step in range(2):  # the second runs what the first compiled (on a GPU, in the pinned memory it freed)
        every = batches(step)
        plain.zero_grad(set_to_none=True)
        wrapped.zero_grad(set_to_none=True)
        sum(plain(t, t.roll(1, dims=1)) for t in every).div(world).backward()
        mine = every[rank]
        loss = wrapped(mine, mine.roll(1, dims=1))
        loss.backward()
        losses.append((loss.item(), plain(mine, mine.roll(1, dims=1)).item()))
        for p, q in zip(sharded.parameters(), plain.parameters()):
            worst = max(worst, ((p.grad.full_tensor() - q.grad).abs().max() / q.grad.abs().max()).item())
    return {"losses": losses, "worst": worst, "graphs": counters["stats"]["unique_graphs"],
            "moved": getattr(sharded.offload, "moved_bytes", None)}


def under_fsdp2(rank: int, world: int) -> dict:
    """Each recompute keeping the feed-forward's products under FSDP2 against the unsharded model
    (:func:`_fsdp2_against_plain`, float64); then what is refused: FSDP2's blocks two a group, and our FSDP's hooks
    inside the groups."""
    from systems.fsdp import FSDP
    from systems.fsdp.torch_fsdp import TorchFSDP

    def batches(step):
        return [torch.randint(0, TOY.vocab_size, (2, TOY.context_length),
                              generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]

    out = {}
    for recompute in ("offload", "keep_attention_and_ffn"):
        torch.manual_seed(0)  # the same weights on both ranks
        out[recompute] = _fsdp2_against_plain(TOY, recompute, lambda m: m.double(), batches, rank, world)
    tokens = torch.zeros(2, TOY.context_length, dtype=torch.long)
    for name, model in (("fsdp2 groups of two", TorchFSDP(TransformerLM(TOY, checkpoint_blocks=2, recompute="offload"))),
                        ("our fsdp", FSDP(TransformerLM(TOY, checkpoint_blocks=1, recompute="offload")))):
        try:
            model(tokens, tokens)
            out[name] = "ran"
        except ValueError as exc:
            out[name] = str(exc)
    return out


@pytest.mark.distributed
def test_under_fsdp2_each_block_is_a_compiled_group_with_the_unsharded_gradients_and_other_sharding_is_refused():
    for rank in launch(under_fsdp2, 2, backend="gloo", timeout_s=300):
        for recompute in ("offload", "keep_attention_and_ffn"):
            run = rank[recompute]
            assert all(loss == pytest.approx(expected, rel=1e-9) for loss, expected in run["losses"]), run
            # FSDP2 reduces the gradients in fp32 (TorchFSDP's policy): fp32's rounding, not float64's
            assert run["worst"] < 1e-5, run
            assert run["graphs"] == 1, run  # one graph for every block, compiled in the first step only
        per_group = _moved_per_group(TOY, 2 * TOY.context_length, 8, 1)
        assert rank["offload"]["moved"] == {0: per_group, 1: per_group, 2: 0}  # what it moves unsharded
        assert "checkpoint each block by itself (checkpoint_blocks=1, got 2)" in rank["fsdp2 groups of two"]
        assert "forward hooks that torch.compile does not trace" in rank["our fsdp"]


@pytest.mark.parametrize("recompute", ["offload", "keep_attention_and_ffn"])
@pytest.mark.parametrize("options, words", [
    (dict(checkpoint_blocks=0), "one block count > 0"),
    (dict(checkpoint_blocks=(2, 1)), "nothing nested"),
    (dict(checkpoint_blocks=1, stored_groups=1), "stored_groups"),
])
def test_offload_refuses_checkpointing_it_does_not_run(recompute, options, words):
    with pytest.raises(ValueError, match=f"recompute='{recompute}'.*{words}"):
        TransformerLM(replace(TOY, num_layers=2), recompute=recompute, **options)


def test_offload_refuses_an_attention_whose_output_it_cannot_keep():
    model = TransformerLM(replace(TOY, num_layers=2, attention="naive"), checkpoint_blocks=1, recompute="offload")
    tokens = torch.randint(0, TOY.vocab_size, (1, TOY.context_length))
    with pytest.raises(ValueError, match="cannot keep the output of attention 'naive'"):
        model(tokens, tokens)


@pytest.mark.gpu
@GPU
def test_gpu_offload_across_to_host_memory_gives_the_gradients_of_the_model_without_checkpointing():
    cfg = replace(TOY, num_layers=3, d_model=256, d_ff=688, num_heads=4, context_length=512, vocab_size=1024)
    plain, moving = _pair(cfg, torch.float32, "cuda", checkpoint_blocks=1)
    tokens = torch.randint(0, cfg.vocab_size, (4, cfg.context_length), device="cuda")
    expected, expected_grads = _loss_and_grads(plain, tokens)
    for _ in range(2):  # the second step reuses the pinned host memory the first one freed
        loss, grads = _loss_and_grads(moving, tokens)
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=0)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, expected_grads[name], rtol=1e-3,
                                       atol=1e-4 * expected_grads[name].abs().max(),
                                       msg=lambda m, name=name: f"{name}: {m}")
    assert all(moving.offload.moved_bytes[g] > 0 for g in (0, 1)) and moving.offload.moved_bytes[2] == 0


def under_fsdp2_on_a_gpu(rank: int, world: int) -> dict:
    """Each recompute keeping the feed-forward's products under FSDP2 on this rank's GPU, offloading's copies crossing
    to host memory, against the model without checkpointing (:func:`_fsdp2_against_plain`, fp32)."""
    cfg = replace(TOY, num_layers=3, d_model=256, d_ff=688, num_heads=4, context_length=512, vocab_size=1024)

    def batches(step):  # fresh tokens every step, for the one rank this runs on
        return [torch.randint(0, cfg.vocab_size, (4, cfg.context_length), device="cuda")]

    out = {}
    for recompute in ("offload", "keep_attention_and_ffn"):
        torch.seed()  # fresh weights
        out[recompute] = _fsdp2_against_plain(cfg, recompute, lambda m: m.cuda(), batches, rank, world)
    return out


@pytest.mark.gpu
@GPU
def test_gpu_under_fsdp2_each_block_a_compiled_group_gives_the_gradients_of_the_model_without_checkpointing():
    (run,) = launch(under_fsdp2_on_a_gpu, 1, backend="nccl", timeout_s=300)
    for recompute in ("offload", "keep_attention_and_ffn"):
        got = run[recompute]
        assert all(loss == pytest.approx(expected, rel=1e-4) for loss, expected in got["losses"]), got
        assert got["worst"] < 1e-3, got  # fp32 on the GPU, compiled blocks against eager ones
        assert got["graphs"] == 1, got
    assert all(run["offload"]["moved"][g] > 0 for g in (0, 1)) and run["offload"]["moved"][2] == 0, run


@pytest.mark.gpu
@GPU
def test_gpu_a_backward_stopped_by_an_error_leaves_no_copy_to_write_into_memory_freed_by_it():
    """What a user relies on, not how it is reached: on the H200 the stopped backward itself returned only once its
    copies were done, without the wait of ``_Offloaded.__del__`` too (the experiment log of 2026-12-01)."""
    offload, brought_back = ActivationOffload(), []
    load = offload._load
    offload._load = lambda entry: (load(entry), brought_back.append(entry.on_device.data_ptr()))
    x = torch.randn(2**27, device="cuda", requires_grad=True)  # 512 MiB: its copies take milliseconds
    cached = [torch.empty_like(x) for _ in range(8)]  # so that no allocation below waits for the device (cudaMalloc)
    del cached
    with offload.group(0, 1):
        y = x.sin()  # saves x: moved to host memory
    with offload.group(1, float("inf")):
        z = y.cos()  # saves y, kept: unpacking it brings x back ahead

    def stop(grad):
        raise RuntimeError("stopped between the two groups' backward")

    y.register_hook(stop)
    # the compute stream busy for about 0.1 s: the copy back, which waits for the work queued before it, and what
    # is queued there after the error both start when it ends
    torch.cuda._sleep(2 * 10**8)
    with pytest.raises(RuntimeError, match="stopped"):
        z.sum().backward()
    del y, z  # the graph and x's copy brought back, never handed over, freed
    fresh, size = [], x.numel() * x.element_size()
    while not any(t.data_ptr() <= brought_back[0] < t.data_ptr() + size for t in fresh):  # the memory copied into
        assert len(fresh) < 8, "the allocator did not hand out the memory the copy writes into"
        fresh.append(torch.empty_like(x).fill_(7.0))
    torch.cuda.synchronize()
    assert all(bool((t == 7.0).all()) for t in fresh), "the copy brought back wrote into memory allocated after it"
