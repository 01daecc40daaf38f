"""The DynamicConv Transformer to and from fairseq's `lightconv_iwslt_de_en` (dynamic convolutions).

The name mapping (project -> fairseq 0.12) is the identity on every parameter, because the
project's model names its modules as fairseq does, except for:

    encoder.layers.N.layer_norms.0          -> encoder.layers.N.layer_norm1
    encoder.layers.N.layer_norms.1          -> encoder.layers.N.layer_norm2
                                               (fairseq < 0.10 used the project's names; both read)
    decoder.embed_out                       -> decoder.output_projection.weight
                                               (fairseq < 0.10: decoder.embed_out; both read; with
                                               shared input/output embeddings it is
                                               decoder.embed_tokens.weight and the project has no
                                               decoder.embed_out)
    (nothing)                               -> {encoder,decoder}.layers.N.conv.conv_bias: fairseq
                                               0.12's scriptable DynamicConv always holds a bias
                                               of shape (1, 1, C) that lightconv never uses
                                               (conv_bias=False); written as zeros, ignored
    (nothing)                               -> encoder.version, decoder.version: fairseq's format
                                               marks, tensor([2.]), written, ignored on reading
    (nothing)                               <- {encoder,decoder}.embed_positions._float_tensor /
                                               .weights: old fairseq's sinusoid buffers, computed,
                                               never learnt; ignored on reading

One behaviour differs, and the project keeps the paper's: where a causal kernel is longer than
the target (K > T in a decoder layer, so only T taps see the sequence), fairseq 0.12 trains with
its scriptable unfold path, which drops the invisible taps *before* the softmax (renormalising
over the visible ones), while its own incremental decoder (fairseq-generate), fairseq's band
path and the CUDA kernel the paper trained with take the softmax over all K taps and then drop
them. The project does the latter in training and decoding alike, so a teacher-forced batch
with T < K scores here as fairseq-generate scores it step by step; with T >= K (and always in
the encoder) fairseq's training forward and the project's agree.

Tensors keep their shapes: both models keep nn.Linear's (out, in) layout, and the layer norms,
attention projections and dynamic-convolution kernel predictors (`conv.weight_linear`, no bias)
are the same modules. A checkpoint is read with `torch.load(weights_only=True)`; the only class
fairseq pickles besides tensors and plain containers, argparse.Namespace, is allowed for that
one load through `torch.serialization.safe_globals`. Exported checkpoints hold only tensors and
plain containers, so fairseq's own loader reads them under torch's weights_only default.

This module needs only torch (reading checkpoints, `model.init_checkpoint`); writing them and
running fairseq's tools is `fairseq_tools`, which needs the fairseq extra.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...models.dynamicconv import DynamicConvConfig
from ...validation import ConfigError

INSTALL_HINT = (
    "fairseq is not installed; install the extra with `./setup.sh --fairseq` (or `pip install numpy "
    "cython wheel && pip install --no-build-isolation '.[fairseq]'`)"
)
ARCH = "lightconv_iwslt_de_en"
CHECKPOINT_NAME = "checkpoint_best.pt"
OUTPUT = "decoder.output_projection.weight"
OLD_OUTPUT = "decoder.embed_out"
FORMAT_MARKS = ("encoder.version", "decoder.version")
UNUSED = re.compile(r"(coder\.embed_positions\.(_float_tensor|weights)|\.conv\.conv_bias)$")
ENCODER_NORM = re.compile(r"^(encoder\.layers\.\d+)\.layer_norms\.([01])\.")
FAIRSEQ_ENCODER_NORM = re.compile(r"^(encoder\.layers\.\d+)\.layer_norm([12])\.")
# Training hyperparameters of DynamicConvConfig: everything else is the architecture.
DROPOUTS = ("dropout", "weight_dropout", "attention_dropout", "relu_dropout", "input_dropout")


def fairseq_available() -> bool:
    return importlib.util.find_spec("fairseq") is not None


def require_fairseq(field_name: str) -> None:
    """A one-line ConfigError naming `field_name` when the fairseq extra is missing."""
    if not fairseq_available():
        raise ConfigError(field_name, INSTALL_HINT)


# ---- architecture ------------------------------------------------------------------------------


def fairseq_arguments(model: DynamicConvConfig) -> list[str]:
    """fairseq-train's model flags for the project's `model` section."""
    flags = {
        "arch": ARCH,
        "encoder-conv-type": "dynamic",
        "decoder-conv-type": "dynamic",
        "encoder-embed-dim": model.embed_dim,
        "decoder-embed-dim": model.embed_dim,
        "encoder-conv-dim": model.embed_dim,
        "decoder-conv-dim": model.embed_dim,
        "encoder-ffn-embed-dim": model.ffn_dim,
        "decoder-ffn-embed-dim": model.ffn_dim,
        "encoder-attention-heads": model.heads,
        "decoder-attention-heads": model.heads,
        "encoder-layers": model.encoder_layers,
        "decoder-layers": model.decoder_layers,
        "encoder-kernel-size-list": str(list(model.encoder_kernels)),
        "decoder-kernel-size-list": str(list(model.decoder_kernels)),
        "encoder-glu": model.glu,
        "decoder-glu": model.glu,
        "weight-softmax": model.weight_softmax,
        **{name.replace("_", "-"): getattr(model, name) for name in DROPOUTS},
    }
    arguments = [item for key, value in flags.items() for item in (f"--{key}", str(value))]
    return arguments + (
        ["--share-decoder-input-output-embed"] if model.share_decoder_input_output_embed else []
    )


def model_config(args: Mapping[str, Any], field_name: str) -> DynamicConvConfig:
    """The project's model section for fairseq's model arguments (a checkpoint's cfg.model or
    args); a ConfigError naming `field_name` for anything the project's model cannot compute."""

    get = args.get
    arch = get("_name") or get("arch")
    equal = {
        "architecture (lightconv*)": str(arch).startswith("lightconv"),
        "dynamic convolutions": get("encoder_conv_type", "dynamic")
        == get("decoder_conv_type", "dynamic")
        == "dynamic",
        "one width": len(
            {
                get(n)
                for n in (
                    "encoder_embed_dim",
                    "decoder_embed_dim",
                    "encoder_conv_dim",
                    "decoder_conv_dim",
                    "decoder_output_dim",
                    "decoder_input_dim",
                )
            }
        )
        == 1,
        "one FFN width": get("encoder_ffn_embed_dim") == get("decoder_ffn_embed_dim"),
        "one head count": get("encoder_attention_heads") == get("decoder_attention_heads"),
        "one GLU choice": bool(get("encoder_glu")) == bool(get("decoder_glu")),
        "post-norm layers": not get("encoder_normalize_before")
        and not get("decoder_normalize_before"),
        "sinusoidal positions": not get("encoder_learned_pos")
        and not get("decoder_learned_pos")
        and not get("no_token_positional_embeddings"),
        "separate source and target embeddings": not get("share_all_embeddings"),
        "a plain softmax output": get("adaptive_softmax_cutoff") is None,
    }
    missing = [what for what, ok in equal.items() if not ok]
    if missing:
        raise ConfigError(
            field_name,
            f"a checkpoint of another architecture ({arch}); the project's "
            f"DynamicConv Transformer needs {', '.join(missing)}",
        )
    config = DynamicConvConfig(
        embed_dim=get("encoder_embed_dim"),
        ffn_dim=get("encoder_ffn_embed_dim"),
        heads=get("encoder_attention_heads"),
        encoder_layers=get("encoder_layers"),
        decoder_layers=get("decoder_layers"),
        encoder_kernels=tuple(get("encoder_kernel_size_list")),
        decoder_kernels=tuple(get("decoder_kernel_size_list")),
        glu=bool(get("encoder_glu")),
        weight_softmax=bool(get("weight_softmax", True)),
        share_decoder_input_output_embed=bool(get("share_decoder_input_output_embed")),
        **{name: float(get(name, 0.0)) for name in DROPOUTS},
    )
    config.validate(field_name)
    return config


def same_architecture(a: DynamicConvConfig, b: DynamicConvConfig) -> list[str]:
    """The architecture fields (not dropouts) where `a` and `b` differ."""
    return [
        f.name
        for f in dataclasses.fields(a)
        if f.name not in (*DROPOUTS, "init_checkpoint") and getattr(a, f.name) != getattr(b, f.name)
    ]


# ---- weights -----------------------------------------------------------------------------------


def fairseq_name(name: str) -> str:
    """The fairseq 0.12 name of one of the project's parameters."""
    return (
        OUTPUT
        if name == OLD_OUTPUT
        else ENCODER_NORM.sub(lambda m: f"{m[1]}.layer_norm{int(m[2]) + 1}.", name)
    )


def project_name(name: str) -> str:
    """The project's name of a fairseq parameter (0.12's names or older ones)."""
    if name in (OUTPUT, OLD_OUTPUT):
        return OLD_OUTPUT
    return FAIRSEQ_ENCODER_NORM.sub(lambda m: f"{m[1]}.layer_norms.{int(m[2]) - 1}.", name)


def to_fairseq(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The project's state_dict in fairseq 0.12's names (fp32, CPU), with the format marks and
    the unused convolution biases fairseq's model holds."""
    state = {
        fairseq_name(name): tensor.detach().float().cpu() for name, tensor in state_dict.items()
    }
    for name, tensor in list(state.items()):
        if name.endswith(".conv.weight_linear.weight"):
            state[name.replace("weight_linear.weight", "conv_bias")] = torch.zeros(
                1, 1, tensor.shape[1]
            )
    state.setdefault(OUTPUT, state["decoder.embed_tokens.weight"])  # shared input/output embedding
    return {**state, **{mark: torch.tensor([2.0]) for mark in FORMAT_MARKS}}


def from_fairseq(
    state_dict: Mapping[str, torch.Tensor], shared_output: bool
) -> dict[str, torch.Tensor]:
    """fairseq's state_dict (0.12's names or older ones) in the project's names."""
    state = {
        project_name(name): tensor
        for name, tensor in state_dict.items()
        if name not in FORMAT_MARKS and not UNUSED.search(name)
    }
    if shared_output:
        state.pop(OLD_OUTPUT, None)
    return state


# ---- files -------------------------------------------------------------------------------------


def write_dictionary(symbols: list[str], path: Path) -> None:
    """fairseq's dict.<lang>.txt: one `word count` line per symbol after the four specials. The
    project keeps no counts; fairseq reads only the order, so every count is written as 1."""
    path.write_text("".join(f"{word} 1\n" for word in symbols[4:]), encoding="utf-8")


def read_dictionary(path: Path) -> list[str]:
    """The symbols of a fairseq dict.<lang>.txt, specials first (fairseq's ids)."""
    from ...data.iwslt14 import SPECIALS

    words = [
        line.split(" ")[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return [*SPECIALS, *words]


@dataclass(frozen=True)
class Checkpoint:
    """A fairseq checkpoint as the project reads it."""

    model: DynamicConvConfig
    state_dict: dict[str, torch.Tensor]  # project names
    langs: tuple[str, str]  # source, target (the dict.<lang>.txt beside it)


def load_checkpoint(path: str | Path, field_name: str) -> Checkpoint:
    """A fairseq checkpoint's model section, weights and languages, read safely."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(field_name, f"{path}: no such checkpoint file")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file is the same user error
        raise ConfigError(
            field_name,
            f"{path}: not a fairseq checkpoint torch can load safely "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]})",
        ) from None
    if not isinstance(state, Mapping) or "model" not in state:
        raise ConfigError(field_name, f"{path}: not a fairseq checkpoint (no 'model' weights)")
    cfg = state.get("cfg") or {}
    args, task = (
        (plain(cfg.get("model")), plain(cfg.get("task")))
        if cfg
        else (plain(state.get("args")),) * 2
    )
    if not isinstance(args, Mapping):
        raise ConfigError(
            field_name, f"{path}: a fairseq checkpoint without model arguments (cfg.model or args)"
        )
    config = model_config(args, field_name)
    langs = ((task or {}).get("source_lang") or "de", (task or {}).get("target_lang") or "en")
    return Checkpoint(
        config, from_fairseq(state["model"], config.share_decoder_input_output_embed), langs
    )


def init_from_checkpoint(
    model: torch.nn.Module,
    config: DynamicConvConfig,
    src_symbols: list[str],
    tgt_symbols: list[str],
) -> None:
    """Load `config.init_checkpoint` into `model` (the project's, built from `config`): the same
    architecture (dropouts may differ), the same vocabularies (checked against the dict.<lang>.txt
    files beside the checkpoint when they are there), every weight present."""
    field_name, path = "model.init_checkpoint", Path(config.init_checkpoint)
    checkpoint = load_checkpoint(path, field_name)
    differ = same_architecture(checkpoint.model, config)
    if differ:
        there = ", ".join(
            f"{n} {getattr(checkpoint.model, n)!r} there, {getattr(config, n)!r} here"
            for n in differ
        )
        raise ConfigError(field_name, f"{path}: a checkpoint of another architecture ({there})")
    for lang, symbols in zip(checkpoint.langs, (src_symbols, tgt_symbols)):
        file = path.parent / f"dict.{lang}.txt"
        if file.is_file() and read_dictionary(file) != symbols:
            raise ConfigError(
                field_name,
                f"{file}: another vocabulary than the trial's data (the model's "
                "word ids would mean other words)",
            )
    try:
        model.load_state_dict(checkpoint.state_dict, strict=True)
    except RuntimeError as error:
        raise ConfigError(
            field_name,
            f"{path}: its weights do not fit the model ({' '.join(str(error).split())[:300]})",
        ) from None


def plain(value: Any) -> Any:
    """Namespaces (fairseq's legacy model arguments) as dicts, all the way down."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
