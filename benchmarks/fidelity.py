"""Fidelity: the project's trainer against an independent plain PyTorch loop of the same recipe.

The guard for every change of the trainer: WideResNet-16-2 on a CIFAR-10 subset, the paper's
recipe (SGD, Nesterov 0.9, weight decay 5e-4, lr 0.1 cut x0.2 at 30/60/80% of the updates,
batch 100, 4-pixel pad + random crop + horizontal flip), trained by `tune_lowmem.train.Trainer`
and by the loop below, which imports nothing from the project but the data arrays (the same
seeded train / validation split) and has its own model, augmentation and schedule. Each seed
trains both; per epoch it prints both means of train loss and validation accuracy, the mean
project - independent difference over seeds and its 95% t-interval. The project is faithful when
every interval holds 0 (exit status 0; 1 otherwise). `--logs` pools the per-seed rows of earlier
runs (their stderr) into one table. `--lockstep` takes the random draws out: the plain loop
starts from the project's initial weights and trains on the project's minibatches, and both
must agree exactly (the sharper guard for changes that keep the trainer's random draws).

    PYTHONPATH=$PWD nice .venv/bin/python benchmarks/fidelity.py --seeds 3 --epochs 4 --train 2000 \
        --jobs 3
"""

from __future__ import annotations

import argparse
import ast
import math
import multiprocessing
import re
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F
from torch import nn

# Student t quantiles (two-sided 95%) by degrees of freedom, for the interval over seeds.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
LR, MOMENTUM, WEIGHT_DECAY, GAMMA, CUTS = 0.1, 0.9, 5e-4, 0.2, (0.3, 0.6, 0.8)
LOG_LINE = re.compile(r"^(project|independent) seed (\d+): (\[.*\])$")  # run_one's stderr


# ---- the independent implementation -----------------------------------------------------------


class Block(nn.Module):
    """Pre-activation residual block: BN-ReLU-conv3x3-BN-ReLU-conv3x3, 1x1 shortcut on a change."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.short = (
            nn.Conv2d(cin, cout, 1, stride, bias=False) if stride > 1 or cin != cout else None
        )

    def forward(self, x):
        o = F.relu(self.bn1(x))
        skip = x if self.short is None else self.short(o)
        return self.conv2(F.relu(self.bn2(self.conv1(o)))) + skip


class WRN(nn.Module):
    """WideResNet-depth-width for 32x32 images (Zagoruyko & Komodakis 2016)."""

    def __init__(self, depth: int = 16, width: int = 2, classes: int = 10):
        super().__init__()
        n, w = (depth - 4) // 6, [16, 16 * width, 32 * width, 64 * width]
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        layers = []
        for g in range(3):
            for i in range(n):
                layers.append(
                    Block(w[g] if i == 0 else w[g + 1], w[g + 1], 2 if g and not i else 1)
                )
        self.layers = nn.Sequential(*layers)
        self.bn, self.fc = nn.BatchNorm2d(w[3]), nn.Linear(w[3], classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.relu(self.bn(self.layers(self.conv(x))))
        return self.fc(x.mean((2, 3)))


def prepare(images: torch.Tensor) -> torch.Tensor:
    """uint8 NCHW to normalised float."""
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def crop_flip(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Zero-pad 4, take a random 32x32 window, flip half of the images; image by image."""
    padded = F.pad(images, (4, 4, 4, 4))
    out = torch.empty_like(images)
    offsets = torch.randint(0, 9, (len(images), 2), generator=gen).tolist()
    flips = (torch.rand(len(images), generator=gen) < 0.5).tolist()
    for i, ((y, x), flip) in enumerate(zip(offsets, flips)):
        window = padded[i, :, y : y + 32, x : x + 32]
        out[i] = window.flip(2) if flip else window
    return out


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum(
            int((model(prepare(images[i : i + 500])).argmax(1) == labels[i : i + 500]).sum())
            for i in range(0, len(labels), 500)
        )
    return hits / len(labels)


def independent_batches(data, gen: torch.Generator, batch: int):
    """One epoch: a fresh shuffle, full minibatches only, each image cropped and flipped."""
    order = torch.randperm(len(data.train), generator=gen)
    for b in range(len(data.train) // batch):
        idx = order[b * batch : (b + 1) * batch]
        yield prepare(crop_flip(data.train.images[idx], gen)), data.train.labels[idx]


def independent_run(
    data, seed: int, epochs: int, batch: int, model: nn.Module | None = None, batches=None
) -> list[tuple[float, float]]:
    """(train loss, validation accuracy) per epoch of the plain loop; `model` and `batches` (one
    list of minibatches per epoch) replace its own initialisation and data draws (--lockstep)."""
    torch.manual_seed(10_000 + seed)
    gen = torch.Generator().manual_seed(20_000 + seed)
    model = model or WRN()
    opt = torch.optim.SGD(
        model.parameters(), lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY
    )
    total = epochs * (len(data.train) // batch)
    cuts = [math.floor(c * total + 0.5) for c in CUTS]
    step, rows = 0, []
    for epoch in range(epochs):
        model.train()
        losses = []
        for x, y in independent_batches(data, gen, batch) if batches is None else batches[epoch]:
            for group in opt.param_groups:
                group["lr"] = LR * GAMMA ** sum(step >= c for c in cuts)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
        rows.append((statistics.fmean(losses), accuracy(model, data.val.images, data.val.labels)))
    return rows


# ---- the project, and the comparison ----------------------------------------------------------


def project_config(seed: int, args):
    from tune_lowmem.config import TrialConfig

    return TrialConfig.from_dict(
        {
            "task": "wrn-cifar10",
            "seed": seed,
            "device": "cpu",
            "model": {"depth": 16, "width": 2},
            "schedule": {"epochs": args.epochs, "batch_size": args.batch},
            "data": {"train_subset": args.train, "val_size": args.val, "test_subset": 100},
        }
    )


def project_run(seed: int, args) -> tuple[list[tuple[float, float]], int]:
    from tune_lowmem.train import Trainer

    trainer = Trainer(project_config(seed, args))
    history = trainer.run()
    params = sum(p.numel() for p in trainer.model.parameters())
    return [(m["train_loss"], m["val_accuracy"]) for m in history], params


def run_one(kind: str, seed: int, args) -> tuple[list[tuple[float, float]], int]:
    """One seed of one side: (train loss, validation accuracy) per epoch, and the parameter count."""
    torch.set_num_threads(args.threads)
    if kind == "project":
        rows, params = project_run(seed, args)
    else:
        from tune_lowmem.data.cifar10 import Cifar10

        data = Cifar10.from_config(project_config(seed, args).data, seed)  # the arrays only
        rows = independent_run(data, seed, args.epochs, args.batch)
        params = sum(p.numel() for p in WRN().parameters())
    print(f"{kind} seed {seed}: {rows}", file=sys.stderr, flush=True)
    return rows, params


def interval(diffs: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval of the per-seed differences."""
    mean = statistics.fmean(diffs)
    half = T_975.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


def table(ours: list, theirs: list) -> bool:
    """Per epoch and metric: both means, the mean difference and its interval; whether every
    interval holds 0. `ours`, `theirs`: per seed, (train loss, val accuracy) per epoch."""
    print(
        f"{'epoch':>5} {'metric':>9} {'project':>9} {'indep.':>9} {'diff':>9} {'95% interval':>21}  holds 0"
    )
    faithful = True
    for epoch in range(len(ours[0])):
        for k, name in enumerate(("train loss", "val acc")):
            a = [run[epoch][k] for run in ours]
            b = [run[epoch][k] for run in theirs]
            mean, low, high = interval([x - y for x, y in zip(a, b)])
            holds = low <= 0 <= high
            faithful &= holds
            print(
                f"{epoch + 1:>5} {name:>9} {statistics.fmean(a):9.4f} {statistics.fmean(b):9.4f} "
                f"{mean:+9.4f} [{low:+9.4f}, {high:+9.4f}]  {'yes' if holds else 'NO'}"
            )
    return faithful


def from_logs(paths: list[str]) -> int:
    """The table over every seed whose two sides appear in these runs' stderr (runs of the
    same settings on different seeds, pooled)."""
    runs = {}
    for path in paths:
        with open(path) as log:
            for line in log:
                found = LOG_LINE.match(line.strip())
                if found:
                    runs[found[1], int(found[2])] = ast.literal_eval(found[3])
    seeds = sorted(s for kind, s in runs if kind == "project" and ("independent", s) in runs)
    if len(seeds) < 2:
        raise SystemExit("--logs: at least 2 seeds with both sides are needed")
    print(f"seeds {', '.join(map(str, seeds))} from {', '.join(paths)}")
    faithful = table([runs["project", s] for s in seeds], [runs["independent", s] for s in seeds])
    print(f"faithful: {'yes' if faithful else 'NO'}")
    return 0 if faithful else 1


def independent_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The project model's state under the plain loop's names (copies)."""
    names = {"stem.": "conv.", "blocks.": "layers.", "shortcut.": "short."}
    state = {}
    for name, tensor in model.state_dict().items():
        for ours, theirs in names.items():
            name = name.replace(ours, theirs)
        state[name] = tensor.clone()
    return state


def lockstep(args) -> int:
    """The plain loop started from the project's initial weights and fed the project's
    minibatches (same order, same augmentation draws): everything but the random draws is
    compared, so both sides must agree exactly, epoch by epoch (exit status 0; 1 otherwise)."""
    from tune_lowmem.train import Trainer

    seed = args.first_seed
    torch.set_num_threads(args.threads)
    trainer = Trainer(project_config(seed, args))
    model = WRN()
    model.load_state_dict(independent_state(trainer.model))  # strict: each has its counterpart
    batches = [list(trainer.task.train_batches(epoch)) for epoch in range(args.epochs)]
    ours = [(m["train_loss"], m["val_accuracy"]) for m in trainer.run()]
    theirs = independent_run(trainer.task.data, seed, args.epochs, args.batch, model, batches)
    print(f"lockstep, seed {seed}: (train loss, val accuracy) per epoch")
    print(f"project     {ours}\nindependent {theirs}")
    # the weights are bit-identical; the reported loss is not: the project divides an fp32 sum
    # by the batch in float64, the loop takes the fp32 mean (a difference in the 8th digit)
    same = all(a[1] == b[1] and abs(a[0] - b[0]) <= 1e-6 * abs(b[0]) for a, b in zip(ours, theirs))
    final = independent_state(trainer.model)
    same_weights = all(torch.equal(final[k], v) for k, v in model.state_dict().items())
    print(f"identical (accuracy exactly, loss to 1e-6): {'yes' if same else 'NO'}")
    print(
        f"final weights and batch-norm statistics bit-identical: {'yes' if same_weights else 'NO'}"
    )
    same &= same_weights
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train", type=int, default=2000, help="training images")
    parser.add_argument("--val", type=int, default=1000, help="validation images")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each run")
    parser.add_argument("--jobs", type=int, default=1, help="runs (seed x side) at once")
    parser.add_argument(
        "--lockstep", action="store_true", help="one seed, both sides on the same draws"
    )
    parser.add_argument("--logs", nargs="+", help="pool earlier runs' stderr instead of training")
    args = parser.parse_args()
    if args.logs:
        return from_logs(args.logs)
    if args.lockstep:
        return lockstep(args)
    if args.seeds < 2:
        parser.error("--seeds: at least 2 are needed for an interval")
    started = time.perf_counter()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(kind, seed) for seed in seeds for kind in ("project", "independent")]
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = dict(zip(jobs, pool.map(run_one, *zip(*jobs), [args] * len(jobs))))
    ours = [done["project", seed][0] for seed in seeds]
    theirs = [done["independent", seed][0] for seed in seeds]
    params = done["project", seeds[0]][1]
    assert params == done["independent", seeds[0]][1], "parameter counts differ"
    print(
        f"WRN-16-2 ({params:,} parameters), {args.train} CIFAR-10 images, batch {args.batch}, "
        f"{args.epochs} epochs, seeds {seeds[0]}..{seeds[-1]}, {args.val} validation images, "
        f"{args.threads} thread(s) per run; difference = project - independent, mean and 95% "
        "t-interval over seeds"
    )
    faithful = table(ours, theirs)
    print(f"faithful: {'yes' if faithful else 'NO'} ({time.perf_counter() - started:.0f} s)")
    return 0 if faithful else 1


if __name__ == "__main__":
    sys.exit(main())
