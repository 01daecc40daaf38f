"""BoTorch's qLogNEHVI with the memory as a deterministic model: the published method for an
objective known in advance, as a sampler (`sampler: qlognehvi`, the ``botorch`` extra).

Why: the known-memory sampler's idea, one learned objective and one known, is how BoTorch treats
an objective computable before evaluation: a `GenericDeterministicModel` beside a Gaussian
process of the unknown objective, under the noisy expected hypervolume improvement (Daulton et
al., NeurIPS 2021; its log form, Ament et al., NeurIPS 2023). This sampler is that method on the
known-memory sampler's own candidates, exactness, start-up and budget (`KnownMemorySampler`),
so that a comparison of the two differs only in the model and the acquisition:

- model: a `SingleTaskGP` (Matern 5/2, one length scale per feature, fitted noise, standardised
  outcome) of the learned objective over the same features (`KnownMemorySampler.encode`), fitted
  by `fit_gpytorch_mll`; the known objectives (the memory, and the predicted update time where
  the space names it) a deterministic model that reads each point's negated logs of them from
  extra input columns (the GP's kernel leaves those columns out);
- acquisition: `qLogNoisyExpectedHypervolumeImprovement` (q = 1) on the modelled trials as its
  noisy baseline, the running points as pending (integrated over, not believed), quasi-Monte
  Carlo samples seeded from the sampler's own generator; the reference point is the one
  known-memory's improvement uses (the least told value, 1.1x the largest of each known one).

Both cost-weighing parts of known-memory apply as they are: `least_memory_start` is the shared
start-up's, and `cost_aware` divides the improvement by each candidate's predicted seconds of
training, here by subtracting their log from qLogNEHVI's log improvement (`per_second`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from optuna.trial import FrozenTrial

from ...config import ConfigError
from ...space import SearchSpace
from . import CostOf, MemoryOf
from .known_memory import Improvement, KnownMemorySampler, reference_log_memory

try:
    from botorch.acquisition.multi_objective.logei import (
        qLogNoisyExpectedHypervolumeImprovement,
    )
    from botorch.exceptions.errors import ModelFittingError
    from botorch.exceptions.warnings import OptimizationWarning
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.deterministic import GenericDeterministicModel
    from botorch.models.model import ModelList
    from botorch.sampling.get_sampler import get_sampler
    from gpytorch.kernels import MaternKernel, ScaleKernel
    from gpytorch.mlls import ExactMarginalLogLikelihood
    from gpytorch.utils.warnings import NumericalWarning
except ImportError:  # the optional extra: the sampler says so when a space names it
    qLogNoisyExpectedHypervolumeImprovement = None

CHUNK = 256  # candidates per evaluation of the acquisition


class QLogNEHVISampler(KnownMemorySampler):
    """`KnownMemorySampler` with BoTorch's model and qLogNEHVI in place of its own (see the
    module)."""

    def __init__(
        self,
        space: SearchSpace,
        memory: MemoryOf,
        cost: CostOf | None = None,
        seed: int | None = None,
        n_startup_trials: int = 4,
        n_candidates: int = 512,
        n_predicted: int = 4,
        n_modelled: int = 64,
        cost_aware: bool = False,
        least_memory_start: bool = False,
        mc_samples: int = 128,
    ):
        if qLogNoisyExpectedHypervolumeImprovement is None:
            raise ConfigError(
                "sampler",
                "qlognehvi needs BoTorch, which is not installed; "
                "pip install 'tune-lowmem[botorch]'",
            )
        if mc_samples < 1:
            raise ValueError("mc_samples must be at least 1")
        super().__init__(
            space,
            memory,
            cost=cost,
            seed=seed,
            n_startup_trials=n_startup_trials,
            n_candidates=n_candidates,
            n_predicted=n_predicted,
            n_modelled=n_modelled,
            cost_aware=cost_aware,
            least_memory_start=least_memory_start,
        )
        self.mc_samples = mc_samples

    def per_second(self, gains: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """`KnownMemorySampler.per_second` on qLogNEHVI's log improvement: the log of the
        improvement per second."""
        return gains - np.log(seconds)

    def improvement(self, options, told, kept, pending) -> Improvement:
        known = self.told_known(told)
        floor = float(self.signed_values(told).min())
        with torch.random.fork_rng(), quiet():  # the fit's own draws, the caller's untouched
            torch.manual_seed(int(self.rng.integers(2**31)))
            model = self.fitted(kept)
        baseline = self.inputs([t.params for t in kept], self.told_log_memory(kept))
        running = [p for p in pending if self.feasible(p) is not None]
        waiting = (
            self.inputs(running, [np.log10(self.feasible(p)) for p in running]) if running else None
        )
        seed = int(self.rng.integers(2**31))
        posterior = model.posterior(baseline)  # its kind picks the samplers (one per model)
        features = [self.encode(o[0]) for o in options]

        def gains(which: np.ndarray, log_known: np.ndarray) -> np.ndarray:
            ceiling = reference_log_memory(known, log_known)
            candidates = with_memory([features[i] for i in which], log_known)
            with torch.no_grad(), quiet():
                acquisition = qLogNoisyExpectedHypervolumeImprovement(
                    model=model,
                    ref_point=[floor, *(-ceiling)],
                    X_baseline=baseline,
                    sampler=get_sampler(posterior, torch.Size([self.mc_samples]), seed=seed),
                    X_pending=waiting,
                )
                values = [acquisition(chunk[:, None, :]) for chunk in candidates.split(CHUNK)]
            return torch.cat(values).numpy()

        return gains

    def fitted(self, kept: Sequence[FrozenTrial]) -> ModelList:
        """The learned objective's GP on the `kept` trials beside the known objectives'
        deterministic model (the inputs' last columns, which the GP's kernel leaves out). Where every start of
        the fit stops short of an optimum (BoTorch then rolls each back), the GP keeps its
        initial hyperparameters: an ask never fails for a fit (seen on a nearly flat
        objective: the ViT table's)."""
        inputs = self.inputs([t.params for t in kept], self.told_log_memory(kept))
        targets = torch.tensor(self.signed_values(kept), dtype=torch.float64)[:, None]
        knowns = len(self.knowns)
        features = inputs.shape[-1] - knowns
        kernel = MaternKernel(nu=2.5, ard_num_dims=features, active_dims=tuple(range(features)))
        learned = SingleTaskGP(inputs, targets, covar_module=ScaleKernel(kernel))
        try:
            fit_gpytorch_mll(ExactMarginalLogLikelihood(learned.likelihood, learned))
        except ModelFittingError:
            learned.eval()
        memory = GenericDeterministicModel(lambda x: x[..., -knowns:], num_outputs=knowns)
        return ModelList(learned, memory)

    def told_log_memory(self, trials: Sequence[FrozenTrial]) -> np.ndarray:
        return np.log10(self.told_known(trials))

    def inputs(self, points: Sequence[Mapping[str, Any]], log_memory) -> torch.Tensor:
        return with_memory([self.encode(p) for p in points], log_memory)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Warnings that a few dozen points make expected, silenced: the fit's optimiser stopping
    early (it then refits from other starts) and jitter added to a nearly noise-free posterior
    covariance (the modelled points' own, with the noise fitted small)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizationWarning)
        warnings.simplefilter("ignore", NumericalWarning)
        yield


def with_memory(features: Sequence[Sequence[float]], log_known) -> torch.Tensor:
    """Each point's features with its negated log known objectives as the last columns
    (BoTorch maximises every objective)."""
    memory = -np.asarray(log_known, float).reshape(len(features), -1)
    return torch.tensor(np.hstack([np.asarray(features, float), memory]), dtype=torch.float64)
