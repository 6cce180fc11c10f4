"""The Transformer LM: shapes, causality, parameter counts, and each layer against its formula."""

import math

import pytest
import torch

from systems.attention import available, get_attention
from systems.model import (PRESETS, ModelConfig, RMSNorm, RotaryEmbedding, SwiGLU, TransformerBlock, TransformerLM,
                           parameter_count, preset, preset_rows)

TINY = dict(vocab_size=97, context_length=24, d_model=32, num_layers=2, num_heads=4, d_ff=48)


def tiny_model(**kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**TINY, **kw}))


def test_logits_shape_and_dtype():
    model = tiny_model()
    tokens = torch.randint(0, 97, (3, 17))
    logits = model(tokens)
    assert logits.shape == (3, 17, 97)
    assert logits.dtype == torch.float32


def test_future_tokens_do_not_change_earlier_logits():
    model = tiny_model()
    tokens = torch.randint(0, 97, (2, 24))
    t = int(torch.randint(1, 23, ()).item())
    changed = tokens.clone()
    changed[:, t:] = torch.randint(0, 97, changed[:, t:].shape)
    a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-5)
    # and the change is visible from position t on, so the test can fail
    assert not torch.allclose(a[:, t:], b[:, t:])


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_count_matches_formula(name):
    cfg = preset(name)
    with torch.device("meta"):
        model = TransformerLM(cfg)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(cfg)


def test_parameter_counts_of_presets():
    # independent arithmetic: embedding + head = 2·V·d; block = attention 4d² + SwiGLU 3·d·d_ff + 2 norms
    small = 2 * 10_000 * 768 + 12 * (4 * 768**2 + 3 * 768 * 3072 + 2 * 768) + 768
    assert parameter_count(preset("small")) == small
    # "2.7B" is the handout's name; with a SwiGLU feed-forward of d_ff = 10240 the model has 3.41 B
    assert round(parameter_count(preset("2.7B")) / 1e9, 2) == 3.41


def test_presets_are_the_handout_table():
    table = {"small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16), "large": (1280, 5120, 36, 20),
             "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32)}
    for name, (d, ff, layers, heads) in table.items():
        c = PRESETS[name]
        assert (c.d_model, c.d_ff, c.num_layers, c.num_heads, c.vocab_size) == (d, ff, layers, heads, 10_000)


def test_the_2026_leaderboard_model_is_its_handouts_and_outside_the_size_table():
    cfg = preset("leaderboard-2026")
    assert (cfg.vocab_size, cfg.context_length, cfg.d_model, cfg.d_ff, cfg.num_layers, cfg.num_heads) == \
        (151_936, 32_768, 4096, 11_008, 34, 32)
    # about 8.1 B parameters (the handout's figure): 2·V·d for embedding and head, 34 blocks of 4d² + 3·d·d_ff
    assert round(parameter_count(cfg) / 1e9, 1) == 8.1
    assert "leaderboard-2026" not in [row["size"] for row in preset_rows()]


def test_a_model_built_on_the_meta_device_is_initialised_as_one_built_in_memory():
    cfg = preset("tiny", vocab_size=97, context_length=24)
    torch.manual_seed(5)
    direct = TransformerLM(cfg)
    with torch.device("meta"):
        later = TransformerLM(cfg)
    later.to_empty(device="cpu")
    torch.manual_seed(5)
    later.init_weights()
    for (name, a), b in zip(direct.state_dict().items(), later.state_dict().values()):
        assert torch.equal(a, b), name
    rope, fresh = later.layers[0].attn.rope, direct.layers[0].attn.rope
    assert torch.equal(rope.cos, fresh.cos) and torch.equal(rope.sin, fresh.sin)
    tokens = torch.randint(0, 97, (2, 24))
    torch.testing.assert_close(later(tokens), direct(tokens), rtol=0, atol=0)


def test_bad_configs_and_inputs_raise():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="unknown model size"):
        preset("huge")
    with pytest.raises(ValueError, match="exceeds context_length"):
        tiny_model()(torch.zeros(1, 25, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown attention"):
        get_attention("nope")


def test_rmsnorm_against_float64_formula():
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16))
    x = torch.randn(4, 5, 16)
    x64 = x.double()
    expected = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    torch.testing.assert_close(norm(x).double(), expected, rtol=1e-5, atol=1e-6)


def test_swiglu_against_formula():
    ffn = SwiGLU(8, 12)
    x = torch.randn(3, 8)
    a, b = x @ ffn.w1.weight.T, x @ ffn.w3.weight.T
    torch.testing.assert_close(ffn(x), (a * torch.sigmoid(a) * b) @ ffn.w2.weight.T)


def test_rope_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, max_len=32, theta=10_000.0)
    q, k = torch.randn(8), torch.randn(8)
    seq = lambda v: v.expand(1, 1, 32, 8)  # the same vector at every position
    rq, rk = rope(seq(q))[0, 0], rope(seq(k))[0, 0]
    torch.testing.assert_close(rq[5] @ rk[2], rq[20] @ rk[17], rtol=1e-4, atol=1e-5)
    # rotation keeps norms
    torch.testing.assert_close(rq.norm(dim=-1), q.norm().expand(32), rtol=1e-5, atol=1e-5)


def test_the_blocks_share_one_rotary_table_that_moves_with_the_model():
    model = tiny_model(attention="naive")
    tables = {id(block.attn.rope) for block in model.layers}
    assert len(tables) == 1  # one table, not one per block
    assert len(list(model.buffers())) == 2 and not any("rope" in k for k in model.state_dict())
    model.to(torch.float64)
    assert all(block.attn.rope.cos.dtype == torch.float64 for block in model.layers)
    # a block built alone (the block benchmarks') has its own
    assert TransformerBlock(model.cfg).attn.rope is not model.layers[0].attn.rope


def test_sdpa_and_naive_attention_agree_in_the_model():
    tokens = torch.randint(0, 97, (2, 20))
    naive = tiny_model(attention="naive")(tokens)
    sdpa = tiny_model(attention="sdpa")(tokens)
    torch.testing.assert_close(naive, sdpa, rtol=1e-4, atol=1e-5)


def test_set_attention_switches_every_block_and_keeps_the_weights():
    tokens = torch.randint(0, 97, (2, 12))
    model = tiny_model(attention="naive")
    model.set_attention("sdpa")
    assert model.cfg.attention == "sdpa"
    assert all(block.attn.attend is get_attention("sdpa") for block in model.layers)
    # same weights (same seed), other attention from the start: the same logits
    torch.testing.assert_close(model(tokens), tiny_model(attention="sdpa")(tokens), rtol=0, atol=0)
    with pytest.raises(ValueError, match="unknown attention implementation 'fast'.*choose one of"):
        model.set_attention("fast")
    assert model.cfg.attention == "sdpa"


@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_against_float64_loop(causal):
    from systems.attention.reference import naive_attention

    q, k, v = torch.randn(2, 7, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    out = naive_attention(q, k, v, causal)
    for b in range(2):
        for i in range(7):
            keys = range(min(i + 1, 5)) if causal else range(5)
            s = torch.tensor([float(q[b, i].double() @ k[b, j].double()) / math.sqrt(8) for j in keys])
            p = torch.softmax(s, 0)
            expected = sum(p[n] * v[b, j].double() for n, j in enumerate(keys))
            torch.testing.assert_close(out[b, i].double(), expected, rtol=1e-5, atol=1e-6)


def test_registry_lists_the_kernels():
    assert {"naive", "sdpa", "flash_pytorch", "flash_triton"} <= set(available())
