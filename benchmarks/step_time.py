"""Training-step cost of the techniques, as ratios measured side by side in one run.

Every variant runs the same real minibatches; variants are interleaved round by round, in a
fresh random order each round (a fixed order lets a load that drifts within a round favour the
early ones), and each ratio is the median over rounds of that round's ratio to 'no technique'.

    .venv/bin/python benchmarks/step_time.py [--depth 16 --width 2 --batch 100 --steps 1 --rounds 11]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F

from tune_lowmem.config import TrialConfig
from tune_lowmem.models.wideresnet import WideResNet
from tune_lowmem.train import Trainer


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

    def train_step(self, batch) -> None:
        images, labels = batch
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
        "sparse 30% (dynamic)": config(
            **{"sparsity.density": 0.3, "sparsity.period_schedule": "constant"}
        ),
        "bf16": config(precision="bf16"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    base = {
        "model.depth": args.depth,
        "model.width": args.width,
        "schedule.batch_size": args.batch,
        "data.train_subset": args.batch * args.steps,
        "data.val_size": 100,
        "data.test_subset": 100,
        "device": "cpu",
    }
    configs = variants(base)
    trainers = {name: Trainer(c) for name, c in configs.items()}
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
    print(
        f"overhead of our step vs hand-written: {1 / ratios['hand-written loop'] - 1:+.1%} (target: within 5%)"
    )


if __name__ == "__main__":
    main()
