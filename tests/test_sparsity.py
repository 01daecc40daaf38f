"""Dynamic sparse reparameterization on packed layers: masks, rewiring, the schedule, and
training with it."""

import math

import pytest
import torch
from torch import nn

from tests.conftest import timed, tiny_wrn_config
from tune_lowmem.config import ConfigError, TrialConfig
from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.techniques.packed import PackedLayer, dense_shape, sparse_storage_bytes
from tune_lowmem.techniques.rewiring import RunLength
from tune_lowmem.techniques.sparsity import DynamicSparsity, Sparsity, apportion, rewiring_period
from tune_lowmem.techniques.sparsity_config import SparsityConfig
from tune_lowmem.train import Trainer

# 10 updates an epoch in the tiny config; rewire every other update, with plenty of churn.
CHURN = {
    "sparsity.density": 0.3,
    "sparsity.period_schedule": "constant",
    "sparsity.constant_period": 2,
    "sparsity.fraction_multiplier": 4.0,
}


def assert_packed(sparsity: DynamicSparsity) -> None:
    """Nonzero count on target; each layer's values, gradient and optimizer state hold exactly
    its nonzeros (nothing dense is kept)."""
    assert sparsity.nonzeros() == sparsity.target_nonzeros
    for name in sparsity.names:
        layer = sparsity.layer(name)
        values = layer.weight
        assert values.dim() == 1 and int(layer.mask().sum()) == values.numel(), name
        if values.grad is not None:
            assert values.grad.shape == values.shape, name
        states = [
            v for v in sparsity.optimizer.state[values].values() if torch.is_tensor(v) and v.dim()
        ]
        assert states and all(s.numel() <= values.numel() for s in states), name


def two_layer_toy(**sparsity) -> tuple[nn.Module, DynamicSparsity]:
    """Two 1000-weight layers at density 0.5 (500 nonzeros each); Np = 0.05 * 2000 = 100."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(100, 10, bias=False), nn.Linear(10, 100, bias=False))
    config = SparsityConfig(**{"density": 0.5, "fraction": 0.05, **sparsity})
    return model, DynamicSparsity(model, ["0.weight", "1.weight"], config, RunLength(10, 10))


def set_active(model, sparsity, small_counts: list[int]) -> None:
    """Give each layer's first `small` active weights 1e-4 (under H = 1e-3) and the rest 1.0."""
    with torch.no_grad():
        for name, small in zip(sparsity.names, small_counts):
            values = sparsity.values(name)
            values.fill_(1.0)
            values[:small] = 1e-4


# ---- which weights are sparse -----------------------------------------------------------------


def test_wrn_sparsifies_block_convs_only_at_uniform_density():
    model = WideResNet(depth=16, width=2)
    dense_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = TrialConfig.from_dict({"sparsity.density": 0.3, "schedule.epochs": 1})
    technique = Sparsity(config, _task(config))
    technique.apply(model)
    names = set(technique.engine.names)
    assert names == {f"blocks.{i}.conv{j}.weight" for i in range(6) for j in (1, 2)}
    for name, param in model.named_parameters():
        if name in names:  # packed: the initial weights at the mask's positions
            layer = technique.engine.layer(name)
            assert param.numel() == round(0.3 * dense_before[name].numel()), name
            assert torch.equal(param.detach(), dense_before[name][layer.mask()]), name
        else:  # stem, 1x1 shortcuts, classifier, batch norm: untouched
            assert torch.equal(param.detach(), dense_before[name]), name
    buffers = ("weight_shape", "weight_columns", "weight_rows")
    index = {f"{n.removesuffix('weight')}{b}" for n in names for b in buffers}
    assert set(model.state_dict()) == set(WideResNet(depth=16, width=2).state_dict()) | index


def test_transformer_selection_skips_embeddings_tied_projection_and_norms():
    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 8)
            self.conv = nn.Conv1d(8, 8, 3)
            self.ffn = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
            self.norm = nn.LayerNorm(8)
            self.out = nn.Linear(8, 50, bias=False)
            self.out.weight = self.embed.weight

    config = TrialConfig.from_dict({"task": "dct-iwslt14"})
    assert _task(config).sparse_parameter_names(Toy()) == [
        "conv.weight",
        "ffn.0.weight",
        "ffn.2.weight",
    ]
    # the generic rule of any other task also keeps the first and last layer dense
    generic = TrialConfig.from_dict({"task": "tv-cifar10"})
    assert _task(generic).sparse_parameter_names(Toy()) == ["ffn.0.weight"]


def test_invalid_density_is_refused_by_the_config():
    for bad in (0, -0.1, 1.5, "half"):
        with pytest.raises(ConfigError, match=r"sparsity\.density") as error:
            TrialConfig.from_dict({"sparsity.density": bad})
        assert error.value.field == "sparsity.density"


# ---- rewiring on constructed cases -------------------------------------------------------------


def test_apportion_is_exact_proportional_and_spills_over_full_layers():
    assert apportion(10, [1, 1, 1], [10, 10, 10]) == [4, 3, 3]
    assert apportion(100, [600, 300, 100], [1000] * 3) == [60, 30, 10]
    # the first layer can take only 20 of its 60; the other 40 go 3:1 to the others
    assert apportion(100, [600, 300, 100], [20, 1000, 1000]) == [20, 60, 20]
    assert apportion(5, [0, 0], [2, 3]) == [2, 3]
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        weights = torch.randint(0, 50, (5,), generator=generator).tolist()
        capacity = torch.randint(0, 40, (5,), generator=generator).tolist()
        total = int(torch.randint(0, sum(capacity) + 1, (1,), generator=generator))
        shares = apportion(total, weights, capacity)
        assert sum(shares) == total and all(0 <= s <= c for s, c in zip(shares, capacity))
    with pytest.raises(ValueError):
        apportion(6, [1, 1], [2, 3])


def test_regrowth_follows_surviving_nonzeros_with_new_weights_zero():
    model, sparsity = two_layer_toy()
    set_active(model, sparsity, [100, 300])  # survivors 400 and 200
    old = {name: sparsity.mask(name) for name in sparsity.names}
    assert sparsity.rewire() == 400
    # 400 regrown in proportion 400:200 -> 266.67 and 133.33 -> 267 and 133 (largest remainder)
    assert [s.nonzeros for s in sparsity.layer_stats()] == [400 + 267, 200 + 133]
    for name, survivors in zip(sparsity.names, (400, 200)):
        mask, before = sparsity.mask(name), old[name]
        layer = sparsity.layer(name)
        weight = layer.unpacked(layer.weight.detach())
        assert layer.weight.numel() == int(mask.sum())  # the layer holds its new count
        grown = mask & ~before
        assert int((mask & before).sum()) == survivors  # no just-pruned position came back
        assert torch.all(weight[mask & before] == 1.0)  # survivors are the large ones
        assert not weight[~mask].any() and not weight[grown].any()


def test_gradients_are_the_dense_gradients_at_the_nonzeros():
    model, sparsity = two_layer_toy()
    dense = nn.Sequential(*(nn.Linear(a, b, bias=False) for a, b in ((100, 10), (10, 100))))
    with torch.no_grad():
        for index, name in enumerate(sparsity.names):
            dense[index].weight.copy_(sparsity.layer(name).unpacked(sparsity.values(name)))
    x = torch.randn(8, 100, generator=torch.Generator().manual_seed(1))
    for net in (model, dense):
        for _ in range(2):  # a second microbatch's gradient accumulates
            net(x).pow(2).mean().backward()
    assert torch.equal(model(x), dense(x))
    for index, name in enumerate(sparsity.names):
        values = sparsity.values(name)
        assert values.grad.shape == values.shape
        assert torch.equal(values.grad, dense[index].weight.grad[sparsity.mask(name)]), name


@pytest.mark.parametrize("pruned", [10, 45])  # of 150 zeros: by distinct draws; by a permutation
def test_regrowth_is_uniform_over_the_zero_positions_and_never_onto_an_active_one(pruned):
    """One 200-weight layer at 50 nonzeros, `pruned` of them under H, rewired from the same
    state with 1,000 seeds: every regrown position was zero (the layer holds its 50 values at 50
    distinct positions, the survivors among them), and each of the 150 zeros is regrown about
    equally often (expected 1000 * pruned / 150; the bounds are over 4 standard deviations)."""
    trials, counts = 1000, torch.zeros(200, dtype=torch.int64)
    for trial in range(trials):
        torch.manual_seed(0)
        model = nn.Linear(10, 20, bias=False)
        config = SparsityConfig(density=0.25, fraction=0.05)
        sparsity = DynamicSparsity(model, ["weight"], config, RunLength(10, 10))
        before = sparsity.mask("weight").reshape(-1)
        set_active(model, sparsity, [pruned])
        sparsity.generator.manual_seed(trial)
        sparsity.rewire()
        after = sparsity.mask("weight").reshape(-1)
        assert int(after.sum()) == sparsity.values("weight").numel() == 50
        assert int((after & before).sum()) == 50 - pruned  # the survivors, nothing onto them
        counts += after & ~before
    expected = trials * pruned / 150
    assert not counts[before].any()
    assert expected / 2 < counts[~before].min() <= counts[~before].max() < expected * 1.5


def test_threshold_halves_when_too_many_fall_under_it_and_doubles_when_too_few():
    model, sparsity = two_layer_toy()  # Np = 100
    set_active(model, sparsity, [100, 300])  # 400 > 110
    sparsity.rewire()
    assert sparsity.threshold == pytest.approx(5e-4)
    set_active(model, sparsity, [0, 0])  # 0 < 90
    sparsity.rewire()
    sparsity.rewire()
    assert sparsity.threshold == pytest.approx(2e-3)
    set_active(model, sparsity, [50, 50])  # 100: within 10% of Np, H stays
    assert sparsity.rewire() == 100 and sparsity.threshold == pytest.approx(2e-3)
    assert sparsity.nonzeros() == sparsity.target_nonzeros == 1000


def test_a_layer_is_never_emptied():
    model, sparsity = two_layer_toy()
    set_active(model, sparsity, [500, 0])
    with torch.no_grad():
        sparsity.values("0.weight")[7] = 5e-4
    assert sparsity.rewire() == 499
    kept = sparsity.values("0.weight").detach()
    assert int(kept.count_nonzero()) == 1 and float(kept.abs().max()) == pytest.approx(
        5e-4, rel=1e-3
    )
    assert sparsity.nonzeros() == 1000


# ---- schedule and storage ----------------------------------------------------------------------


def period_at(sparsity: SparsityConfig, epochs: int, epoch: int, scale: float = 1.0):
    """The period during `epoch` of a run of `epochs` epochs of 450 updates."""
    return rewiring_period(sparsity, RunLength(epochs * 450, 450, scale=scale), epoch, epoch * 450)


def test_absolute_schedule_scales_boundaries_with_epochs_and_stops():
    paper = SparsityConfig(density=0.3, schedule_units="absolute")
    assert [period_at(paper, 200, e) for e in (0, 24, 25, 80, 139, 140, 189, 190)] == [
        100,
        100,
        200,
        400,
        400,
        800,
        800,
        None,
    ]
    assert [period_at(paper, 20, e) for e in (2, 3, 8, 14, 19)] == [100, 200, 400, 800, None]
    quarter = SparsityConfig(density=0.3, period_multiplier=0.25, schedule_units="absolute")
    assert period_at(quarter, 200, 30, scale=0.5) == 25
    constant = SparsityConfig(
        density=0.3, period_schedule="constant", constant_period=7, period_multiplier=2
    )
    assert period_at(constant, 200, 150) == 14
    assert period_at(SparsityConfig(density=0.3, rewiring="static"), 200, 0) is None


def test_rewiring_happens_every_period_and_never_when_static():
    for rewiring, expected in (("dynamic", 3), ("static", 0)):
        _, sparsity = two_layer_toy(
            rewiring=rewiring, period_schedule="constant", constant_period=3
        )
        for update in range(10):
            sparsity.after_step(0, update)
        assert sparsity.rewirings == expected


def test_dct_halves_the_period():
    config = TrialConfig.from_dict({"task": "dct-iwslt14", "sparsity.density": 0.4})
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))
    technique = Sparsity(config, _task(config))
    technique.apply(model)
    assert technique.engine.period == 50


def _task(config: TrialConfig):
    """The config's task, synthetic: no data set is needed to ask it about weights or epochs."""
    return config.task_type()(config, torch.device("cpu"), synthetic=True)


def test_sparse_storage_counts_values_smallest_column_indices_and_int32_row_pointers():
    # a 64x32x3x3 conv (288 columns) with 1000 nonzeros in fp16: 1000 * (2 + 2) values and uint16
    # columns, 65 * 4 row pointers
    assert sparse_storage_bytes(1000, (64, 32, 3, 3), 2) == 4000 + 260
    assert sparse_storage_bytes(10, (3, 2**16), 4) == 10 * (4 + 2) + 4 * 4  # the most for uint16
    assert sparse_storage_bytes(10, (3, 2**16 + 1), 4) == 10 * (4 + 4) + 4 * 4  # int32 beyond
    assert sparse_storage_bytes(10, (3, 256, 257), 4) == 10 * (4 + 4) + 4 * 4  # columns: 256 x 257


def test_bitmap_storage_counts_one_bit_per_position_and_best_takes_the_smaller():
    shape = (64, 32, 3, 3)  # 18,432 positions: a 2,304-byte bitmap
    assert sparse_storage_bytes(1000, shape, 2, "bitmap") == 2000 + 2304
    assert sparse_storage_bytes(1000, shape, 2, "best") == 4000 + 260  # 5% dense: CSR wins
    assert sparse_storage_bytes(5530, shape, 2, "best") == 11060 + 2304  # 30% dense: bitmap wins
    with pytest.raises(ValueError, match="layout: 'coo'"):
        sparse_storage_bytes(10, shape, 2, "coo")


def test_the_objective_counts_sparse_weights_in_the_configs_storage_layout():
    """`sparsity.storage` moves the accounted model part (and so the objective) by exactly the
    layouts' difference over the packed sparse weights; the real index buffers, measured, agree."""
    from tune_lowmem.memory.measure import measure
    from tune_lowmem.memory.predict import dry_run, predict, shape_key

    layouts = {
        layout: tiny_wrn_config(**{"sparsity.density": 0.3, "sparsity.storage": layout})
        for layout in ("csr", "bitmap", "best")
    }
    predicted = {layout: predict(config) for layout, config in layouts.items()}
    run = dry_run(shape_key(layouts["csr"]))
    nonzeros = {
        f"{name}.weight": layer.weight.numel()
        for name, layer in run.model.named_modules()
        if isinstance(layer, PackedLayer)
    }
    assert nonzeros
    saving = sum(
        sparse_storage_bytes(n, dense_shape(run.model, name), 4, "csr")
        - sparse_storage_bytes(n, dense_shape(run.model, name), 4, "bitmap")
        for name, n in nonzeros.items()
    )
    assert saving > 0  # 30% dense fp32: a bitmap is smaller than CSR with uint16 indices
    assert predicted["csr"].model_bytes - predicted["bitmap"].model_bytes == saving
    assert predicted["best"].model_bytes == predicted["bitmap"].model_bytes
    assert predicted["csr"].activation_bytes == predicted["bitmap"].activation_bytes
    measured = measure(layouts["bitmap"])
    assert measured.model_bytes == predicted["bitmap"].model_bytes
    with pytest.raises(ConfigError, match=r"sparsity.storage: 'coo' .*csr, bitmap, best"):
        tiny_wrn_config(**{"sparsity.storage": "coo"})


# ---- inside training ---------------------------------------------------------------------------


def test_a_rewiring_drops_the_gradients_and_frees_each_layers_old_tensors_as_it_moves(
    monkeypatch,
):
    """A rewiring holds one layer's old and new tensors at once, not the whole model's: before a
    layer moves, every layer moved before it has freed its old weights, momentum and gradient.
    The sparse layers' gradients are dropped (the step has used them; the next one clears them)."""
    from tune_lowmem.memory import stepping
    from tune_lowmem.memory.tracker import StorageTracker

    trainer, batches = stepping.synthetic_trainer(
        tiny_wrn_config(**{"sparsity.density": 0.3}), None
    )
    stepping.warm_up(trainer, batches)  # momentum exists
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.task.loss(trainer.model, next(batches))[0].backward()  # gradients exist
    engine, model = trainer.technique(Sparsity).engine, trainer.model
    old_bytes = []  # each sparse layer's old weights, momentum and gradient
    for name in engine.names:
        weight = engine.values(name)
        tensors = [weight, weight.grad, trainer.optimizer.state[weight]["momentum_buffer"]]
        old_bytes.append(sum(t.untyped_storage().nbytes() for t in tensors))
    existing = [*model.parameters(), *model.buffers()]
    existing += [p.grad for p in model.parameters() if p.grad is not None]
    existing += [
        t for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t)
    ]
    tracker, starts, move = StorageTracker(existing), [], engine.move
    del existing, tensors, weight

    def timed_move(*args):
        starts.append(tracker.clock)
        move(*args)

    monkeypatch.setattr(engine, "move", timed_move)
    with tracker:
        engine.rewire()
    for layer, start in enumerate(starts):
        freed = -sum(life.nbytes for life in tracker.freed if life.born <= start)
        assert freed >= sum(old_bytes[:layer]), engine.names[layer]
    for name, param in model.named_parameters():
        assert (param.grad is None) == (name in engine.names), name


def test_adam_moments_share_the_mask():
    model, sparsity = two_layer_toy(period_schedule="constant", constant_period=1, fraction=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    sparsity.attach(optimizer)
    x = torch.randn(32, 100, generator=torch.Generator().manual_seed(1))
    for update in range(6):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        sparsity.after_step(0, update)
        assert_packed(sparsity)
    assert sparsity.rewirings == 5 and sparsity.last_pruned > 0
    assert {"exp_avg", "exp_avg_sq"} <= set(optimizer.state[model[0].weight])


@pytest.mark.parametrize(
    "setting", [{}, {"precision": "fp16"}, {"precision": "amp-bf16"}, {"microbatch.size": 5}]
)
def test_masks_hold_through_training_steps(setting):
    trainer = Trainer(tiny_wrn_config(**CHURN, **setting))
    sparsity = trainer.technique(Sparsity).engine
    masks_at_start = {name: sparsity.mask(name) for name in sparsity.names}
    for batch in trainer.task.train_batches(0):
        trainer.train_step(batch)
        assert_packed(sparsity)
    assert sparsity.rewirings == 4 and sparsity.last_pruned > 0
    assert any(not torch.equal(sparsity.mask(n), m) for n, m in masks_at_start.items())
    dtype = torch.float16 if setting.get("precision") == "fp16" else torch.float32
    assert all(sparsity.values(name).dtype == dtype for name in sparsity.names)


def test_resume_from_state_dict_continues_identically():
    config = tiny_wrn_config(**CHURN, **{"schedule.epochs": 2})
    straight = Trainer(config)
    history = straight.run()
    states = []
    Trainer(config).run(
        on_epoch=lambda m, t: states.append(t.state_dict()) if m["epoch"] == 1 else None
    )
    resumed = Trainer(config)
    resumed.load_state_dict(states[0])
    strip = lambda h: [{k: v for k, v in m.items() if not timed(k)} for m in h]
    assert strip(resumed.run()) == strip(history)
    ours, theirs = resumed.technique(Sparsity).engine, straight.technique(Sparsity).engine
    assert all(torch.equal(ours.mask(n), theirs.mask(n)) for n in theirs.names)
    assert (
        resumed.technique(Sparsity).engine.threshold
        == straight.technique(Sparsity).engine.threshold
    )


@pytest.mark.slow
def test_real_run_at_30_percent_density_learns_and_keeps_its_density():
    """WRN-10-2 on 3,000 real CIFAR-10 images, 3 epochs, rewiring every 10 updates (30-50 s)."""
    config = tiny_wrn_config(
        **{
            "schedule.epochs": 3,
            "schedule.batch_size": 50,
            "data.train_subset": 3000,
            "data.val_size": 1000,
            "data.test_subset": 1000,
            "model.width": 2,
            "sparsity.density": 0.3,
            "sparsity.period_schedule": "constant",
            "sparsity.constant_period": 10,
        }
    )
    trainer = Trainer(config)
    history = trainer.run()
    sparsity = trainer.technique(Sparsity).engine
    final = history[-1]
    print(
        f"sparse WRN-10-2 at density 0.3: val {final['val_accuracy']:.3f} test {final['test_accuracy']:.3f}, "
        f"{final['sparsity_rewirings']:.0f} rewirings, nonzeros {final['sparsity_nonzeros']:.0f}"
    )
    assert final["val_accuracy"] > 0.25 and final["test_accuracy"] > 0.25  # chance is 0.10
    assert (
        final["sparsity_rewirings"] == 17
    )  # after updates 10, 20, ..., 170 of 180 and final["sparsity_last_pruned"] > 0
    expected = sparsity.target_nonzeros
    assert expected == sum(round(0.3 * s.numel) for s in sparsity.layer_stats())
    assert all(m["sparsity_nonzeros"] == expected for m in history)
    assert math.isclose(final["sparsity_density"], 0.3, abs_tol=1e-4)
    assert_packed(sparsity)
