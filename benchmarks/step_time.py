"""Training-step cost of the techniques, as ratios measured side by side in one run.

Every variant runs the same real minibatches; variants are interleaved round by round, in a
fresh random order each round (a fixed order lets a load that drifts within a round favour the
early ones), and each ratio is the median over rounds of that round's ratio to 'no technique'.
Sparse layers are trained packed (`techniques.packed`); beside each packed sparse variant runs
the masked dense training it replaces (`tests/packed_reference.py`), and the median over rounds
of packed / masked is reported. Then one sparse layer's matrix product, dense against torch's
CSR kernel (`torch.sparse.mm`), says at which density a sparse kernel wins on this CPU.
Results go to benchmarks/results/step_time.json, with the machine's state (`machine.Watch`; a
loaded machine's results are refused unless `--allow-load`).

    .venv/bin/python benchmarks/step_time.py [--depth 16 --width 2 --batch 100 --steps 1 --rounds 11]
        [--only sparse] [--allow-load]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from machine import Watch, add_arguments, describe

from tune_lowmem.config import TrialConfig
from tune_lowmem.data import cifar10
from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.techniques.packed import scatter
from tune_lowmem.train import Trainer

RESULTS = Path(__file__).parent / "results" / "step_time.json"
DENSITIES = (0.3, 0.1)
MASKED = "masked dense"


class HandWrittenLoop:
    """What a user would write by hand: the same model and optimizer, no tune-lowmem machinery."""

    def __init__(self, config: TrialConfig):
        torch.manual_seed(config.seed)
        self.model = WideResNet.from_config(config.model).train()
        s = config.schedule
        self.optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=s.lr,
            momentum=s.momentum,
            nesterov=True,
            weight_decay=s.weight_decay,
        )

    def train_step(self, batch: cifar10.Minibatch) -> None:
        images, labels = cifar10.normalize(batch.images()), batch.labels
        self.optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(images), labels).backward()
        self.optimizer.step()


def variants(base: dict) -> dict[str, TrialConfig]:
    def config(**flat) -> TrialConfig:
        return TrialConfig.from_dict({**base, **flat})

    return {
        "no technique": config(),
        "checkpoint residual-1": config(checkpoint="residual-1"),
        "checkpoint residual-2": config(checkpoint="residual-2"),
        "checkpoint residual-2*": config(checkpoint="residual-2*"),
        "microbatch 10 true": config(**{"microbatch.size": 10}),
        "microbatch 10 simulated": config(
            **{"microbatch.size": 10, "microbatch.mode": "simulated"}
        ),
        **{
            f"sparse {density:.0%} packed": config(
                **{"sparsity.density": density, "sparsity.period_schedule": "constant"}
            )
            for density in DENSITIES
        },
        "bf16": config(precision="bf16"),
    }


def masked_dense(config: TrialConfig) -> Trainer:
    """The masked dense trainer of a sparse config (the exactness tests' reference)."""
    from tests.packed_reference import trainer

    return trainer(config, True, pytest.MonkeyPatch())


def sparse_kernel(density: float, rows: int = 1024, columns: int = 512, tokens: int = 4000):
    """Seconds of y = x W^T for a (rows x columns) weight at `density`: dense (what a packed layer
    runs after building its weight, the build included) and torch's CSR kernel, medians of 7."""
    weight = torch.randn(rows, columns)
    weight *= torch.rand(rows, columns) < density
    x = torch.randn(tokens, columns)
    csr = weight.to_sparse_csr()
    where = weight.reshape(-1).nonzero()[:, 0]
    values = weight.reshape(-1)[where]

    def dense():
        return x @ scatter(values, where, (rows, columns)).t()

    def sparse():
        return torch.sparse.mm(csr, x.t())

    times = {}
    for name, fn in (("dense", dense), ("csr", sparse)):
        fn()
        samples = []
        for _ in range(7):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        times[name] = statistics.median(samples)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--only", nargs="*", help="variants whose names hold one of these words")
    add_arguments(parser)
    args = parser.parse_args()
    watch = Watch.start(torch.get_num_threads(), args.allow_load)
    base = {
        "model.depth": args.depth,
        "model.width": args.width,
        "schedule.batch_size": args.batch,
        "data.train_subset": args.batch * args.steps,
        "data.val_size": 100,
        "data.test_subset": 100,
        "device": "cpu",
    }
    configs = {
        name: config
        for name, config in variants(base).items()
        if name == "no technique" or not args.only or any(word in name for word in args.only)
    }
    trainers = {name: Trainer(c) for name, c in configs.items()}
    for density in DENSITIES:
        packed = f"sparse {density:.0%} packed"
        trainers[f"sparse {density:.0%} {MASKED}"] = masked_dense(configs[packed])
    batches = list(trainers["no technique"].task.train_batches(0))[: args.steps]
    runners = {"hand-written loop": HandWrittenLoop(configs["no technique"]), **trainers}
    times: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for round_ in range(args.rounds + 1):  # round 0 warms up
        random.Random(round_).shuffle(order)
        for name in order:
            runner = runners[name]
            started = time.perf_counter()
            for batch in batches:
                runner.train_step(batch)
            if round_:
                times[name].append((time.perf_counter() - started) / len(batches))
    medians = {name: statistics.median(t) for name, t in times.items()}
    ratios = {
        name: statistics.median(a / b for a, b in zip(t, times["no technique"]))
        for name, t in times.items()
    }
    print(
        f"WRN-{args.depth}-{args.width}, batch {args.batch}, CPU threads {torch.get_num_threads()}, "
        f"median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"{'variant':28s} {'s/step':>8s} {'ratio':>8s}  (ratio to 'no technique')")
    for name, median in medians.items():
        print(f"{name:28s} {median:8.3f} {ratios[name]:8.3f}")
    hand_written = 1 / ratios["hand-written loop"] - 1
    print(f"overhead of our step vs hand-written: {hand_written:+.1%} (target: within 5%)")
    packed_ratios = {}
    for density in DENSITIES:
        packed, masked = (
            times[f"sparse {density:.0%} packed"],
            times[f"sparse {density:.0%} {MASKED}"],
        )
        packed_ratios[density] = statistics.median(a / b for a, b in zip(packed, masked))
        print(f"packed / masked dense step at {density:.0%} nonzeros: {packed_ratios[density]:.3f}")
    kernels = {density: sparse_kernel(density) for density in (0.3, 0.1, 0.05, 0.01)}
    print("one 1024x512 layer on 4000 tokens: dense (with the weight built) vs torch.sparse.mm CSR")
    for density, kernel in kernels.items():
        print(
            f"  {density:5.0%} nonzeros: dense {kernel['dense'] * 1e3:7.2f} ms, "
            f"csr {kernel['csr'] * 1e3:7.2f} ms, csr / dense {kernel['csr'] / kernel['dense']:.2f}"
        )
    machine = watch.stop()
    print(describe(machine))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "setup": f"WRN-{args.depth}-{args.width}, batch {args.batch}, "
                f"{torch.get_num_threads()} CPU threads, median of {args.rounds} rounds x "
                f"{args.steps} steps",
                "seconds_per_step": medians,
                "ratio_to_no_technique": ratios,
                "packed_over_masked_dense": {f"{d:.0%}": r for d, r in packed_ratios.items()},
                "layer_kernel_seconds": {f"{d:.0%}": k for d, k in kernels.items()},
                "machine": machine,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
