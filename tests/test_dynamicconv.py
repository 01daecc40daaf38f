"""The DynamicConv Transformer: convolution paths, causality, padding, checkpointing, half
precision, incremental decoding, and the parameter count against fairseq's architecture."""

from __future__ import annotations

import pytest
import torch

from tune_lowmem.models import dynamicconv
from tune_lowmem.models.dynamicconv import (
    DynamicConv,
    DynamicConvConfig,
    DynamicConvTransformer,
    LayerNorm,
)
from tune_lowmem.techniques.precision import cast_model

PAD, EOS = 1, 2
VOCAB = 40


def tiny_config(**changes) -> DynamicConvConfig:
    """Embed 16, 2+2 layers, kernel 3 then 7 (longer than some test sequences), 4 heads."""
    values = {
        "embed_dim": 16,
        "ffn_dim": 32,
        "heads": 4,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_kernels": (3, 7),
        "decoder_kernels": (3, 7),
    }
    return DynamicConvConfig(**{**values, **changes})


def tiny_model(seed: int = 0, vocab: int = VOCAB, **changes) -> DynamicConvTransformer:
    torch.manual_seed(seed)
    return DynamicConvTransformer.from_config(tiny_config(**changes), vocab, vocab, PAD)


def tokens(rows: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    out = torch.randint(4, VOCAB, (rows, length), generator=generator)
    out[:, -1] = EOS
    return out


def naive_conv(conv: DynamicConv, x: torch.Tensor) -> torch.Tensor:
    """out[t] = sum_k w[t, k] x[t + k - padding_l] by loops: the definition itself."""
    weight = conv.kernels(x)  # (B, T, H, K)
    _, T, C = x.shape
    out = torch.zeros_like(x)
    for t in range(T):
        for k in range(conv.kernel_size):
            s = t + k - conv.padding_l
            if 0 <= s < T:
                out[:, t] += weight[:, t, :, k].repeat_interleave(C // conv.heads, dim=1) * x[:, s]
    return out


@pytest.mark.parametrize(
    "kernel,padding,length", [(3, 1, 6), (7, 3, 5), (7, 6, 5), (7, 6, 12), (31, 15, 9)]
)
def test_unfold_and_band_paths_agree_with_the_definition(kernel, padding, length):
    torch.manual_seed(0)
    conv = DynamicConv(16, kernel, padding, heads=4, weight_softmax=True, weight_dropout=0.0)
    x = torch.randn(3, length, 16, requires_grad=True)
    reference = naive_conv(conv, x)
    grads = {}
    for path in ("unfold", "band"):
        out = conv(x, path)
        torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)
        (grads[path],) = torch.autograd.grad(
            (out * torch.arange(out.numel()).view_as(out).sin()).sum(), x
        )
    torch.testing.assert_close(grads["unfold"], grads["band"], rtol=1e-5, atol=1e-6)


def test_auto_path_follows_fairseqs_length_rule(monkeypatch):
    calls = []
    conv = DynamicConv(8, 3, 1, heads=2, weight_softmax=True, weight_dropout=0.0)
    for name in ("_unfolded", "_band"):
        real = getattr(conv, name)
        monkeypatch.setattr(conv, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    conv(torch.randn(1, dynamicconv.UNFOLD_ABOVE, 8))
    conv(torch.randn(1, dynamicconv.UNFOLD_ABOVE + 1, 8))
    assert calls == ["_band", "_unfolded"]
    with pytest.raises(ValueError, match="path: 'fft' is not allowed; allowed: auto, unfold, band"):
        conv(torch.randn(1, 4, 8), "fft")


def test_whole_model_gives_equal_logits_on_either_path():
    model = tiny_model().eval()
    src, tgt = tokens(2, 9), tokens(2, 8, seed=2)
    model.set_conv_path("band")
    band = model(src, tgt)
    model.set_conv_path("unfold")
    torch.testing.assert_close(model(src, tgt), band, rtol=1e-5, atol=1e-5)


def test_decoder_does_not_look_ahead():
    model = tiny_model().eval()
    src, tgt = tokens(2, 7), tokens(2, 9, seed=2)
    changed = tgt.clone()
    changed[:, 5] = (changed[:, 5] + 1 - 4) % (VOCAB - 4) + 4
    before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, :5], before[:, :5])
    assert not torch.allclose(after[:, 5:], before[:, 5:])


def test_left_padding_does_not_change_a_sentence():
    """A source alone and left-padded inside a batch encode to the same outputs: the property
    that makes token microbatches equal to the full batch."""
    model = tiny_model().eval()
    long_src, short_src, tgt = tokens(1, 9), tokens(1, 4, seed=3), tokens(2, 6, seed=2)
    padded = torch.cat([long_src, torch.cat([torch.full((1, 5), PAD), short_src], dim=1)])
    together = model(padded, tgt)
    alone = model(short_src, tgt[1:])
    torch.testing.assert_close(together[1:], alone, rtol=1e-5, atol=1e-5)


def _gradients(model: DynamicConvTransformer, seed: int) -> dict[str, torch.Tensor]:
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks in both runs
    logits = model(tokens(3, 8), tokens(3, 7, seed=2))
    logits.float().logsumexp(-1).sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _saved_bytes(model: DynamicConvTransformer) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens(3, 8), tokens(3, 7, seed=2)).sum()
    return total


def test_checkpointing_gives_the_same_gradients_and_stores_less():
    model = tiny_model(dropout=0.3, weight_dropout=0.1, attention_dropout=0.1).train()
    names = [n for n, _ in model.named_parameters()]
    plain, plain_saved = _gradients(model, seed=5), _saved_bytes(model)
    model.set_grad_checkpointing("residual-1")
    assert [n for n, _ in model.named_parameters()] == names
    checkpointed, checkpointed_saved = _gradients(model, seed=5), _saved_bytes(model)
    for name in names:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)
    assert checkpointed_saved < 0.5 * plain_saved
    model.set_grad_checkpointing("none")
    assert _saved_bytes(model) == plain_saved
    with pytest.raises(
        ValueError, match="checkpoint: 'residual-2' is not allowed; allowed: none, residual-1"
    ):
        model.set_grad_checkpointing("residual-2")


@pytest.mark.parametrize("precision,dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_model_keeps_layer_norm_fp32_and_trains(precision, dtype):
    model = cast_model(tiny_model(), precision).train()
    norms = [m for m in model.modules() if isinstance(m, LayerNorm)]
    assert len(norms) == 2 * 2 + 3 * 2
    assert all(p.dtype == torch.float32 for m in norms for p in m.parameters())
    others = [p for n, p in model.named_parameters() if "norm" not in n]
    assert others and all(p.dtype == dtype for p in others)
    logits = model(tokens(2, 6), tokens(2, 5, seed=2))
    assert logits.dtype == dtype
    logits.float().logsumexp(-1).sum().backward()
    assert all(
        p.grad is not None and p.grad.dtype == p.dtype and p.grad.isfinite().all()
        for p in model.parameters()
    )


def test_layer_norm_computes_in_fp32_for_half_inputs():
    norm = LayerNorm(8)
    x = (torch.randn(4, 8) * 300).half()
    out = norm(x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(
        out.float(), torch.nn.functional.layer_norm(x.float(), (8,)), atol=2e-3, rtol=1e-3
    )


def test_incremental_decoding_equals_full_decoding():
    model = tiny_model().eval()
    src, tgt = tokens(3, 7), tokens(3, 9, seed=2)
    tgt[:, 0] = EOS
    full = model(src, tgt)
    encoder_out = model.encode(src)
    state = model.start_decoding(encoder_out)
    steps = [model.decode_step(tgt[:, t], encoder_out, state) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    # Reordering rows (as beam search does) reorders the state with them.
    index = torch.tensor([2, 0, 0])
    encoder_out, state = encoder_out.reorder(index), state.reorder(index, index)
    nxt = tokens(3, 1, seed=9)[:, 0].clamp(min=4)
    extended = torch.cat([tgt[index], nxt.unsqueeze(1)], dim=1)
    torch.testing.assert_close(
        model.decode_step(nxt, encoder_out, state),
        model(src[index], extended)[:, -1],
        rtol=1e-5,
        atol=1e-5,
    )


def _fairseq_parameter_count(config: DynamicConvConfig, src_vocab: int, tgt_vocab: int) -> int:
    """fairseq's LightConvModel with dynamic convolutions, counted from its module definitions."""
    d, f, H = config.embed_dim, config.ffn_dim, config.heads

    def linear(i, o, bias=True):
        return i * o + (o if bias else 0)

    conv_block = linear(d, 2 * d if config.glu else d) + linear(d, d)
    ffn = linear(d, f) + linear(f, d)
    norm = 2 * d
    encoder = sum(
        conv_block + linear(d, H * k, bias=False) + ffn + 2 * norm for k in config.encoder_kernels
    )
    attention = 4 * linear(d, d)
    decoder = sum(
        conv_block + linear(d, H * k, bias=False) + attention + ffn + 3 * norm
        for k in config.decoder_kernels
    )
    output = 0 if config.share_decoder_input_output_embed else tgt_vocab * d
    return src_vocab * d + encoder + tgt_vocab * d + decoder + output


@pytest.mark.parametrize("changes", [{}, {"share_decoder_input_output_embed": True}, {"glu": True}])
def test_parameter_count_matches_fairseqs_architecture(changes):
    config = DynamicConvConfig(**changes)
    with torch.device("meta"):
        model = DynamicConvTransformer.from_config(
            config, 8848, 6632, PAD
        )  # fairseq's IWSLT'14 vocabularies
    count = sum(p.numel() for p in model.parameters())
    assert count == _fairseq_parameter_count(config, 8848, 6632)
    if not changes:
        assert count == 38_685_184  # fairseq's recipe (our default) leaves the embeddings untied
    if changes == {"share_decoder_input_output_embed": True}:
        assert count == 35_289_600


def test_tied_output_projection_is_the_decoder_embedding():
    model = tiny_model(share_decoder_input_output_embed=True)
    assert model.decoder.embed_out is None
    untied = tiny_model()
    assert untied.decoder.embed_out.shape == untied.decoder.embed_tokens.weight.shape


def test_bad_vocabulary_size_is_refused():
    with pytest.raises(ValueError, match="tgt_vocab_size: 1 is not allowed"):
        DynamicConvTransformer.from_config(tiny_config(), VOCAB, 1, PAD)


def test_forward_and_backward_run_on_shapes_alone():
    """The profiler's dry run: fake parameters and inputs, so no step may depend on token values."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = tiny_model().train()
    model.set_grad_checkpointing("residual-1")
    fake = FakeTensorMode()
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(fake.from_tensor(param)))
    src, tgt = tokens(3, 8), tokens(3, 7, seed=2)
    with fake:
        logits = model(fake.from_tensor(src), fake.from_tensor(tgt))
        logits.sum().backward()
    assert logits.shape == (3, 7, VOCAB)
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


def test_the_task_builds_the_model_for_its_vocabulary_sizes(monkeypatch):
    import torch as _torch

    from tune_lowmem.config import TrialConfig
    from tune_lowmem.tasks.translation import DynamicConvIwslt14

    flat = {
        f"model.{k}": v
        for k, v in tiny_config().__dict__.items()
        if k.startswith(("embed", "ffn", "encoder", "decoder"))
    }
    config = TrialConfig.from_dict({"task": "dct-iwslt14", **flat})
    task = DynamicConvIwslt14(config, _torch.device("cpu"))
    monkeypatch.setattr(task, "vocab_sizes", lambda: (30, 50))  # what the data's dictionaries say
    model = task.build_model()
    assert (
        model.encoder.embed_tokens.num_embeddings == 30
        and model.decoder.embed_tokens.num_embeddings == 50
    )
