"""`tune-lowmem export --format fairseq` and `model.init_checkpoint`: a stored trial's weights go to
fairseq-generate, which translates as the project's decoder does; fairseq checkpoints come back
as a trial's starting point; bad input gets one line and exit status 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from tests.test_translation_task import tiny_dct
from tune_lowmem import cli, store
from tune_lowmem.config import ConfigError
from tune_lowmem.data import data_root, iwslt14
from tune_lowmem.tasks.translation import DynamicConvIwslt14, fairseq_interop, fairseq_tools
from tune_lowmem.tasks.translation.decode import bleu, references, translate

SWEEP = "s"
HAS_FAIRSEQ = fairseq_interop.fairseq_available()
needs_fairseq = pytest.mark.skipif(not HAS_FAIRSEQ, reason=fairseq_interop.INSTALL_HINT)
# fairseq-generate translates 13 test sentences of <= 20 words: not a multiple of 8, the count
# fairseq's default --required-batch-size-multiple would cut the last batch to (dropping 5)
SENTENCES, MAX_WORDS = 13, 20
MAX_LEN = 24  # a random model writes until the limit
LEARNT, LEARNT_WORDS, LEARNT_STEPS = 21, 10, 150  # training pairs a tiny model learns by heart


def stored_trial(root: Path, trial_id: str, config, weights: bool = True, model=None):
    """A completed trial in the store, its final weights (`model`'s, else a fresh model's) kept
    as the trainable keeps them."""
    record = store.TrialRecord(
        sweep=SWEEP, trial_id=trial_id, status="completed", config=config.to_flat()
    )
    store.write_trial(root, record, epochs=[])
    if weights:
        if model is None:
            torch.manual_seed(1)
            model = DynamicConvIwslt14(config, torch.device("cpu")).build_model()
        store.write_model(root, SWEEP, trial_id, model.state_dict())
        return model
    return None


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_final_weights_are_kept_beside_the_trial(tmp_path):
    model = stored_trial(tmp_path, "t1", tiny_dct())
    path = store.model_file(tmp_path, SWEEP, "t1")
    assert path == tmp_path / "models" / f"sweep={SWEEP}" / "t1.pt"
    kept = torch.load(path, weights_only=True)
    assert kept.keys() == model.state_dict().keys()
    assert all(torch.equal(kept[k], v) for k, v in model.state_dict().items())
    assert list(store.read_trials(tmp_path)["trial_id"]) == ["t1"]  # the store reads as before


def test_export_without_the_extra_says_how_to_install(tmp_path, capsys, monkeypatch):
    stored_trial(tmp_path, "t1", tiny_dct())
    monkeypatch.setattr(fairseq_interop, "fairseq_available", lambda: False)
    code, _, err = run_cli(capsys, "export", "t1", "--format", "fairseq", "--store", str(tmp_path))
    assert code == 2 and err.count("\n") == 1
    assert "./setup.sh --fairseq" in err and "--format" in err


@pytest.mark.parametrize(
    ("trial", "argv", "message"),
    [
        ("t1", ["nope"], "'nope' is not a trial"),
        ("wrn", ["wrn"], "is a trial of task wrn-cifar10"),
        ("bare", ["bare"], "has no final weights"),
        ("t1", ["t1", "--sweep", "other"], "is not a trial in sweep other"),
    ],
)
def test_export_bad_input_gets_one_line(tmp_path, capsys, tiny_config, trial, argv, message):
    stored_trial(tmp_path, "t1", tiny_dct())
    stored_trial(tmp_path, "wrn", tiny_config(), weights=False)
    stored_trial(tmp_path, "bare", tiny_dct(), weights=False)
    code, _, err = run_cli(capsys, "export", *argv, "--format", "fairseq", "--store", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_export_refuses_unknown_formats(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "t1", "--format", "onnx", "--store", str(tmp_path))
    assert code == 2 and "--format: 'onnx' is not allowed; allowed: fairseq" in err


def test_init_checkpoint_errors_name_the_field(tmp_path):
    config = tiny_dct(**{"model.init_checkpoint": str(tmp_path / "missing.pt")})
    with pytest.raises(
        ConfigError, match=r"^model.init_checkpoint: .*missing.pt: no such checkpoint file"
    ):
        DynamicConvIwslt14(config, torch.device("cpu")).build_model()
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not a fairseq checkpoint torch can load safely"):
        DynamicConvIwslt14(
            config.replace(**{"model.init_checkpoint": str(tmp_path / "junk.pt")}),
            torch.device("cpu"),
        ).build_model()


# ---- with fairseq ------------------------------------------------------------------------------


def export(root: Path, config, model=None) -> tuple[torch.nn.Module, Path]:
    """`model` (else a fresh one) stored as trial t1 under `root`, exported with the CLI."""
    model = stored_trial(root, "t1", config, model=model)
    out = root / "export"
    argv = ["export", "t1", "--format", "fairseq", "--store", str(root), "--out", str(out)]
    assert cli.main(argv) == 0
    return model, out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny trial exported with the CLI: (config, model, folder)."""
    config = tiny_dct(**{"data.test_subset": None})
    return (config, *export(tmp_path_factory.mktemp("store"), config))


def text_pairs(config, split: str, max_words: int, count: int) -> list[tuple[str, str]]:
    """The first `count` (German, English) lines of `split` with at most `max_words` words."""
    folder = iwslt14.find_folder(data_root(config.data))
    lines = (
        (folder / f"{split}.{lang}").read_text(encoding="utf-8").split("\n")
        for lang in ("de", "en")
    )
    return [p for p in zip(*lines) if 0 < len(p[0].split()) <= max_words][:count]


def both_decoders(config, model, out, pairs, folder, max_len):
    """Hypotheses and tokenised BLEU of fairseq-generate and of the project's decoder."""
    theirs, fairseq_bleu = fairseq_tools.fairseq_generate(out, pairs, folder, max_len=max_len)
    corpus = DynamicConvIwslt14(config, torch.device("cpu")).corpus
    data = iwslt14.ParallelText.encode(*map(list, zip(*pairs)), corpus.src_dict, corpus.tgt_dict)
    ours = translate(model, data, corpus.tgt_dict, max_len_a=0.0, max_len_b=max_len)
    our_bleu = bleu(ours, references(data, corpus.tgt_dict))
    print(f"\nBLEU on {len(pairs)} sentences: project {our_bleu:.2f}, fairseq {fairseq_bleu:.2f}")
    return theirs, fairseq_bleu, ours, our_bleu


@needs_fairseq
def test_fairseq_generate_translates_as_the_project_decodes(exported, tmp_path):
    config, model, out = exported
    pairs = text_pairs(config, "test", MAX_WORDS, SENTENCES)
    theirs, fairseq_bleu, ours, our_bleu = both_decoders(
        config, model, out, pairs, tmp_path, MAX_LEN
    )
    assert len(theirs) == len(ours) == SENTENCES  # every sentence translated
    assert theirs == ours
    assert abs(our_bleu - fairseq_bleu) <= 0.1


@needs_fairseq
def test_a_trained_model_scores_the_same_bleu_with_both_decoders(tmp_path):
    """A tiny model that has learnt 21 short training pairs by heart translates them with both
    decoders: stopping at </s>, not at the length limit, and BLEU well above 0 and equal."""
    config = tiny_dct(**{"data.test_subset": None, "model.dropout": 0.0})
    pairs = text_pairs(config, "valid", LEARNT_WORDS, LEARNT)  # valid.*: the training text here
    task = DynamicConvIwslt14(config, torch.device("cpu"))
    data = iwslt14.ParallelText.encode(
        *map(list, zip(*pairs)), task.corpus.src_dict, task.corpus.tgt_dict
    )
    batch = iwslt14.collate(data, range(len(data)))
    torch.manual_seed(0)
    model = task.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(LEARNT_STEPS):
        logits = model(batch.src_tokens, batch.prev_output_tokens)
        loss, _ = iwslt14.label_smoothed_nll_loss(logits, batch.target, 0.0)
        optimizer.zero_grad()
        (loss / batch.ntokens).backward()
        optimizer.step()
    model, out = export(tmp_path / "store", config, model.eval())
    theirs, fairseq_bleu, ours, our_bleu = both_decoders(
        config, model, out, pairs, tmp_path / "generate", max_len=200
    )
    assert our_bleu > 50
    assert theirs == ours
    assert abs(our_bleu - fairseq_bleu) <= 0.1


@needs_fairseq
def test_a_fairseq_checkpoint_starts_a_trial(exported):
    config, model, out = exported
    start = config.replace(
        **{
            "model.init_checkpoint": str(out / fairseq_interop.CHECKPOINT_NAME),
            "model.dropout": 0.1,
        }
    )  # dropouts are not the architecture
    loaded = DynamicConvIwslt14(start, torch.device("cpu")).build_model()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    other = start.replace(**{"model.ffn_dim": 96})
    with pytest.raises(
        ConfigError,
        match=r"^model.init_checkpoint: .*another architecture \(ffn_dim 64 there, 96 here\)",
    ):
        DynamicConvIwslt14(other, torch.device("cpu")).build_model()


def test_other_architectures_are_refused_by_name():
    with pytest.raises(
        ConfigError,
        match=r"^model.init_checkpoint: a checkpoint of another architecture "
        r"\(transformer_iwslt_de_en\).*needs architecture \(lightconv\*\)",
    ):
        fairseq_interop.model_config({"_name": "transformer_iwslt_de_en"}, "model.init_checkpoint")
    lightweight = {"_name": "lightconv_iwslt_de_en", "encoder_conv_type": "lightweight"}
    with pytest.raises(ConfigError, match="needs dynamic convolutions"):
        fairseq_interop.model_config(lightweight, "model.init_checkpoint")


@needs_fairseq
def test_an_old_style_checkpoint_loads_safely(exported, tmp_path):
    """fairseq < 0.10 pickled its arguments as an argparse.Namespace and named the weights as the
    project does (layer_norms.N, decoder.embed_out): read with weights_only, Namespace allowed."""
    config, model, out = exported
    exported_state = torch.load(out / fairseq_interop.CHECKPOINT_NAME, weights_only=True)
    args = argparse.Namespace(**exported_state["cfg"]["model"])  # the whole flat argument list
    old = {"args": args, "model": {k: v.clone() for k, v in model.state_dict().items()}}
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(Exception, match="Weights only load failed"):  # torch's default refuses it
        torch.load(tmp_path / "old.pt")
    start = config.replace(**{"model.init_checkpoint": str(tmp_path / "old.pt")})
    loaded = DynamicConvIwslt14(start, torch.device("cpu")).build_model()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())


def test_the_new_config_field_leaves_seed_groups_as_they_were(tmp_path, monkeypatch):
    """A point keeps the seed_group an earlier version (without `model.init_checkpoint`) gave it."""
    config = tiny_dct()
    fields = store.write.config_kinds(config.task)
    earlier = {k: v for k, v in fields.items() if k != "model.init_checkpoint"}
    with monkeypatch.context() as patch:  # an earlier version's writer: no such column at all
        patch.setattr(store.write, "config_kinds", lambda task: earlier)
        old = {k: v for k, v in config.to_flat().items() if k in earlier}
        store.write_trial(
            tmp_path, store.TrialRecord(sweep=SWEEP, trial_id="old", status="completed", config=old)
        )
    for trial_id, values in (
        ("new", config),
        ("init", config.replace(**{"model.init_checkpoint": "x.pt"})),
    ):
        record = store.TrialRecord(
            sweep=SWEEP, trial_id=trial_id, status="completed", config=values.to_flat()
        )
        store.write_trial(tmp_path, record)
    groups = store.read_trials(tmp_path).set_index("trial_id")["seed_group"]
    assert groups["new"] == groups["old"] != groups["init"]
