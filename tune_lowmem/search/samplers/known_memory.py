"""The known-memory sampler: learn only what training tells, take memory from the profiler.

Why: a sweep's memory objective is predicted exactly from shapes (a dry run per shape) before any
training (`memory.predict`); only the other objective (accuracy) costs a trial. Optuna's samplers
treat both as unknown. This one (`sampler: known-memory`) models the unknown objective alone
with a Gaussian process over the params (`gaussian_process`) and, per ask, scores many candidate
points by the expected improvement of the front's hypervolume given each one's known memory
(`expected_improvement`): with one uncertain objective the improvement is a sum over the front's
steps, closed form under a Gaussian. Hypervolume is on log memory (savings are ratios).

- Exact params (`exact.exact_values`, as techniques and tasks declare them: checkpointing,
  fused norms, sparse storage, the exact fused step) change memory, never accuracy: the model
  leaves them out, and of the points that train alike (one `exact.training_key`) only the
  least-memory one is ever proposed, once.
- Candidates: every point of a small all-choice space, else random draws of the space (its
  conditions applied by `SearchSpace.sample`) plus one- and two-param changes of the front's
  points. Points already asked are never proposed again, nor points over the memory budget or
  invalid ones (their memory is None): no trial is spent on an infeasible point. Once every
  training was asked, those only a stopped trial tried (the study's ``stopped_points``) are
  proposed once more (`asked_again`): early stopping may have cut a front point short.
- Few predictions an ask: a memory the profiler has not seen costs a dry run (seconds on a
  CPU), so an ask predicts `n_predicted` trainings only, those of the largest improvement at the
  memory a second Gaussian process (of the asked points' log memories, every param a feature)
  guesses, optimistically. Each is weighed at its guessed least-memory variant; the chosen one is
  proposed at its least-memory variant (so the asked points' variants, the second process's
  data, are predicted already). The profiler's memory is kept per `samplers.memory_key` (its
  shape key and whether the trial rewires), so points that differ in a learning rate share it.
- Start: the first point is a random candidate; up to `n_startup_trials` told, each point is the
  one of `n_predicted` random candidates farthest in log memory from the points asked, since the
  front lies along it.
- Trials running in parallel (asked, not told) join the model at its own predicted mean
  (a kriging believer), so parallel asks do not pile onto one spot.
- Bounded models: each learns from at most `n_modelled` trials (`modelled`: every one up to
  that many; past it, those nearest the front, the most recent and a seeded draw), so a long
  sweep's ask costs what its hundredth did; the front is every told point's.
- Conditional params: inactive ones get a neutral encoding (a numeric at its range's middle, a
  choice with no one-hot bit set).

Both models are rebuilt from the study (the journal) at every ask, so a resumed sweep loses
nothing: a sampler rebuilt on the study with the same seed chooses the same point (a cached
memory is the memory predicted again, so caches change only the time an ask takes).
It declares what it is built with (`NEEDS`, `search.samplers`): the space, and `memory`, which
maps a point's params to its known objectives (None: infeasible or invalid): in a sweep the
profiler's predictions through the searcher's screening; in the replay benchmark the recorded
table's predicted memory.

Several known objectives (a memory and the predicted update time, `time.predicted_update_s`):
each candidate is weighed at all of them, the improvement over the learned objective and them
in closed form as well (`expected_improvement_known`); a training's variant is still its
least-memory one, the start-up spread is in their joint log space, and past `n_modelled` the
front's layers are their non-dominated sets (`dominance_front`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState
from scipy.special import ndtr

from ...config import ConfigError
from ...outcome import Direction
from ...space import Param, SearchSpace, worst_value
from ..exact import exact, exchangeable, training_key
from ..stopping.asha import STOPPED_POINTS
from . import KNOWN, CostOf, MemoryOf, known_objectives
from .gaussian_process import GaussianProcess


class KnownMemorySampler(BaseSampler):
    """Expected hypervolume improvement over one learned objective and the known ones (memory,
    and the predicted update time where the space names it)."""

    # built with the space, each point's known memory and its predicted training seconds
    NEEDS = ("space", "memory", "cost")

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
    ):
        knowns = known_objectives(space)
        if len(space.objectives) - len(knowns) != 1:
            raise ConfigError(
                "objectives",
                f"sampler known-memory needs one objective that training tells, the others "
                f"predicted ({', '.join(KNOWN)}); got {', '.join(space.objectives)}",
            )
        if n_startup_trials < 0 or n_candidates < 1 or n_predicted < 1 or n_modelled < 2:
            raise ValueError(
                "n_startup_trials must be at least 0, n_candidates and n_predicted at least 1, "
                "n_modelled at least 2"
            )
        if (cost_aware or least_memory_start) and cost is None:
            raise ValueError("cost_aware and least_memory_start need each point's predicted cost")
        self.space, self.seed = space, seed
        self.knowns = tuple(knowns)  # a point's `memory` gives them, in this order
        self.known = knowns[0]  # the one its variants are chosen by (least first)
        self.learned = next(name for name in space.objectives if name not in knowns)
        self.n_startup_trials, self.n_candidates = n_startup_trials, n_candidates
        self.n_predicted, self.n_modelled = n_predicted, n_modelled
        # the most points that train alike: each asked point's variants in the memory model
        self.most_variants = math.prod(
            max(1, sum(exact(p.name, v) for v in p.values))
            for p in space.params
            if p.kind == "choice"
        )
        self.memory, self.cost = memory, cost
        self.cost_aware, self.least_memory_start = cost_aware, least_memory_start
        self.rng = np.random.default_rng(seed)
        self.fallback = RandomSampler(seed=seed)
        self.cache: dict[str, np.ndarray | None] = {}
        self.costs: dict[str, float | None] = {}
        self.index = {name: i for i, name in enumerate(space.objectives)}  # in told values
        # an uninformative told value (an infeasible or failed point's), and what an ask reads
        # of each of the study's trials, kept once it is finished (`per_finished_trial`)
        self.worst = worst_value(
            self.learned, space.objectives[self.learned], space.base.get("task")
        )
        self.keys: dict[int, tuple[FrozenTrial, str]] = {}
        self.informed: dict[int, tuple[FrozenTrial, bool]] = {}
        self.distributions = {p.name: distribution(p) for p in space.params}

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()
        self.fallback.reseed_rng()

    # ---- Optuna's sampler interface -----------------------------------------------------

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self.distributions)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        stopped = set(study.user_attrs.get(STOPPED_POINTS, []))
        chosen = self.choose(study.get_trials(deepcopy=False), trial.number, stopped)
        if chosen is None:  # no feasible candidate found: the searcher screens what comes
            return {}
        return {name: value for name, value in chosen.items() if name in search_space}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    # ---- choosing a point ----------------------------------------------------------------

    def choose(
        self, trials: Sequence[FrozenTrial], number: int, stopped: AbstractSet[int] = frozenset()
    ) -> dict[str, Any] | None:
        asked = [t for t in trials if t.number != number and t.params]
        told = [t for t in asked if t.state == TrialState.COMPLETE and self.informative(t)]
        seen = {self.key_of(t) for t in asked}
        kept = self.modelled(told, self.n_modelled)
        trainings: dict[str, dict[str, Any]] = {}
        for candidate in self.candidates(kept):
            trainings.setdefault(training_key(candidate), candidate)
        options = [self.variants(c) for k, c in trainings.items() if k not in seen]
        options = options or self.asked_again(asked, stopped)
        if not options:
            return None
        if len(told) < max(self.n_startup_trials, 2):  # the model needs two values at least
            if self.least_memory_start:
                least = self.least_memory()
                if least is not None and training_key(least) not in seen:
                    return least
            return self.spread(options, asked)
        pending = [t.params for t in asked if t.state == TrialState.RUNNING]
        return self.best_improvement(options, told, kept, asked, pending)

    def asked_again(
        self, asked: Sequence[FrozenTrial], stopped: AbstractSet[int]
    ) -> list[list[dict]]:
        """Once every training was asked: those that only a stopped trial tried (`stopped`: the
        points early stopping cut short), each once more. A stop may cut a front point short,
        and a point asked again runs to its end (`MultiObjectiveASHA.decide`)."""
        times = Counter(self.key_of(t) for t in asked)
        again = {
            key: self.variants(t.params)
            for t in asked
            if t.number in stopped and times[key := self.key_of(t)] == 1
        }
        return list(again.values())

    def informative(self, trial: FrozenTrial) -> bool:
        """A told trial that trained: not an infeasible or failed point told the worst value."""

        def trained(trial: FrozenTrial) -> bool:
            value = self.told(trial, self.learned)
            known = self.told_known([trial])
            return math.isfinite(value) and value != self.worst and bool((known > 0).all())

        return per_finished_trial(self.informed, trial, trained)

    def key_of(self, trial: FrozenTrial) -> str:
        """The `training_key` of an asked trial's params."""
        return per_finished_trial(self.keys, trial, lambda t: training_key(t.params))

    def told(self, trial: FrozenTrial, objective: str) -> float:
        return float(trial.values[self.index[objective]])

    def told_known(self, trials: Sequence[FrozenTrial]) -> np.ndarray:
        """The known objectives the `trials` were told, one row each."""
        return np.array([[self.told(t, name) for name in self.knowns] for t in trials], float)

    def known_of(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """A point's known objectives (None: infeasible or invalid), cached per point."""
        key = point_key(params)
        if key not in self.cache:
            known = self.memory(params)
            self.cache[key] = None if known is None else np.atleast_1d(np.asarray(known, float))
        return self.cache[key]

    def memory_of(self, params: Mapping[str, Any]) -> float | None:
        """A point's first known objective (its memory: its variants are chosen by it)."""
        known = self.known_of(params)
        return None if known is None else float(known[0])

    def feasible(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """A point's known objectives where every one is positive (log scale), else None."""
        known = self.known_of(params)
        return known if known is not None and (known > 0).all() else None

    def seconds_of(self, params: Mapping[str, Any]) -> float:
        """A point's predicted training seconds (`cost`), cached per point; inf where none is
        predicted (it then gains nothing per second)."""
        key = point_key(params)
        if key not in self.costs:
            self.costs[key] = self.cost(params)
        seconds = self.costs[key]
        return math.inf if seconds is None or seconds <= 0 else float(seconds)

    def position(self, params: Mapping[str, Any], known: np.ndarray) -> np.ndarray:
        """Where the start-up spreads a point with `known` objectives: their logs, and with
        `least_memory_start` its predicted seconds' log beside them (memory and time jointly)."""
        logged = np.log10(known)
        if not self.least_memory_start:
            return logged
        return np.append(logged, np.log10(self.seconds_of(params)))

    def least_memory(self) -> dict[str, Any] | None:
        """The space's least-memory feasible point, by coordinate descent on the known memory:
        from every param at its first value (a range at its low end), each param in turn set to
        its value (a range: its ends) of least memory, the others held, until no param changes
        (None: no feasible point met). Exact where each param's saving holds whatever the others
        are (techniques' savings combine), and a few predictions a param where a space's
        enumeration would be thousands of dry runs. No draw of the sampler's own: a rebuilt
        sampler finds the same point."""
        draw = RandomDraw(np.random.default_rng(0))
        fixed = {p.name: p.values[0] if p.kind == "choice" else p.low for p in self.space.params}
        point = self.space.sample(Completing(fixed, draw))
        best = self.memory_of(point) if self.feasible(point) is not None else None
        for _ in range(len(self.space.params)):
            changed = False
            for param in self.space.params:
                values = param.values if param.kind == "choice" else (param.low, param.high)
                for value in values:
                    trial = self.space.sample(Completing({**point, param.name: value}, draw))
                    if self.feasible(trial) is None:
                        continue
                    memory = self.memory_of(trial)
                    if best is None or memory < best:
                        point, best, changed = trial, memory, True
            if not changed:
                break
        return point if best is not None else None

    def variants(self, point: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The points that train as `point` does: its exact params' values exchanged
        (`exact.exact_values`), conditions applied."""
        return [
            self.space.sample(Completing({**point, **dict(values)}, RandomDraw(self.rng)))
            for values in itertools.product(*exchangeable(self.space, point))
        ]

    def cheapest(self, variants: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], float] | None:
        """The least-memory one of a training's `variants`, with its memory; None if none is
        feasible."""
        best = None
        for variant in variants:
            known = self.feasible(variant)
            if known is not None and (best is None or known[0] < best[1]):
                best = (variant, float(known[0]))
        return best

    def weighed(self, options, order, count: int, guess=None) -> list[Weighed]:
        """(index, known objectives, variant) of the first `count` trainings of `options` in
        `order` that have a feasible variant: the only ones the ask predicts. Each training is
        weighed at one variant, the first feasible one in the order of `guess` (guessed log
        known objectives per variant, by the first; else as listed); the chosen training's
        cheapest variant is found after."""
        weighed = []
        for index in order:
            variants = options[index]
            ranks = np.argsort(guess[index][:, 0], kind="stable") if guess else range(len(variants))
            found = next(
                (
                    (int(index), k, variants[r])
                    for r in ranks
                    if (k := self.feasible(variants[r])) is not None
                ),
                None,
            )
            if found is not None:
                weighed.append(found)
                if len(weighed) == count:
                    break
        return weighed

    def spread(self, options, asked: Sequence[FrozenTrial]) -> dict[str, Any] | None:
        """Of `n_predicted` trainings drawn at random (one when nothing was asked yet), the one
        farthest in log known objectives (Euclidean; with `least_memory_start`, log predicted
        seconds too: `position`) from every point asked, at its cheapest variant."""
        taken = [
            self.position(t.params, k) for t in asked if (k := self.feasible(t.params)) is not None
        ]
        order = self.rng.permutation(len(options))
        weighed = self.weighed(options, order, self.n_predicted if taken else 1)
        if not weighed:
            return None
        if taken:
            gaps = np.array(
                [min(np.linalg.norm(self.position(v, k) - t) for t in taken) for _, k, v in weighed]
            )
            weighed = [weighed[int(self.rng.choice(np.flatnonzero(np.isclose(gaps, gaps.max()))))]]
        return self.cheapest(options[weighed[0][0]])[0]

    def best_improvement(self, options, told, kept, asked, pending) -> dict[str, Any] | None:
        """The training of the largest expected hypervolume improvement (`improvement`), at its
        cheapest variant, of the `n_predicted` trainings whose improvement is largest at the
        memory a model of the asked points' memories guesses (optimistically: its mean less one
        standard deviation). With `cost_aware`, the improvement per predicted second of
        training (`per_second`): of the trainings weighed, each at the predicted seconds of the
        variant it trains as (its cheapest, which can be its slowest: microbatch 1); before, at
        the seconds a model of the asked points' guesses (as the memory)."""
        score = self.improvement(options, told, kept, pending)
        guess = self.guessed_log_memory(options, asked)
        least = np.array([g[np.argmin(g[:, 0])] for g in guess])  # each at its least memory
        knowns = len(self.knowns)
        guessed = score(np.arange(len(options)), least[:, :knowns])
        if self.cost_aware:
            guessed = self.per_second(guessed, 10.0 ** least[:, knowns])
        order = np.argsort(-guessed, kind="stable")
        weighed = self.weighed(options, order, self.n_predicted, guess)
        if not weighed:
            return None
        which = np.array([index for index, _, _ in weighed])
        found = score(which, np.log10([k for _, k, _ in weighed]))
        if self.cost_aware:  # each priced as what it trains as: its cheapest variant
            seconds = [self.seconds_of(self.cheapest(options[index])[0]) for index in which]
            found = self.per_second(found, np.array(seconds))
        best = np.flatnonzero(np.isclose(found, found.max(), rtol=1e-9, atol=0.0))
        return self.cheapest(options[which[int(self.rng.choice(best))]])[0]

    def improvement(self, options, told, kept, pending) -> Improvement:
        """The acquisition: (indices of `options`, their log known objectives, one row each) ->
        each one's expected hypervolume improvement, closed form (`expected_improvement`, with
        several known objectives `expected_improvement_known`) under a Gaussian process of the
        learned objective that learns the `kept` trials (`modelled`), with the running points at
        its own mean (a kriging believer); the front is every told point's."""
        values = self.signed_values(told)
        known = self.told_known(told)
        model = GaussianProcess.fit(
            np.array([self.encode(t.params) for t in kept]), self.signed_values(kept), self.rng
        )
        if pending:  # a kriging believer: the running points at the model's own mean
            encoded = np.array([self.encode(p) for p in pending])
            model = model.with_points(encoded, model.predict(encoded)[0])
        mean, std = model.predict(np.array([self.encode(o[0]) for o in options]))
        if known.shape[1] == 1:
            front = front_points(values, np.log10(known[:, 0]))
        else:
            front_at = front_indices(values, np.log10(known))

        def gains(which: np.ndarray, log_known: np.ndarray) -> np.ndarray:
            log_known = np.asarray(log_known, float).reshape(len(which), -1)
            ceiling = reference_log_memory(known, log_known)
            if known.shape[1] == 1:
                reference = (float(values.min()), float(ceiling[0]))
                return expected_improvement(
                    mean[which], std[which], log_known[:, 0], front, reference
                )
            return expected_improvement_known(
                mean[which],
                std[which],
                log_known,
                (values[front_at], np.log10(known[front_at])),
                (float(values.min()), ceiling),
            )

        return gains

    def per_second(self, gains: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """The acquisition per predicted second of training: expected improvement per second
        (Snoek, Larochelle & Adams, NeurIPS 2012, "Practical Bayesian Optimization of Machine
        Learning Algorithms", section 3.2), the seconds known before training here rather than
        a model's."""
        return gains / seconds

    def guessed_log_memory(self, options, asked: Sequence[FrozenTrial]) -> list[np.ndarray]:
        """Each training's variants' log known objectives (a row each; with `cost_aware`, their
        log predicted seconds last) as Gaussian processes of those of the asked points and
        their variants (predicted when the point was chosen) guess them (one per column, every
        param a feature), less one standard deviation: a training far from every asked point
        may be cheap. Past `n_modelled` asked points, the variants of those `modelled` keeps,
        as many as bring at most `n_modelled` points."""
        kept = self.modelled(asked, max(2, self.n_modelled // self.most_variants))
        points = {point_key(v): v for t in kept for v in self.variants(t.params)}
        known = [(p, k) for p in points.values() if (k := self.feasible(p)) is not None]
        if self.cost_aware:
            known = [(p, np.append(k, self.seconds_of(p))) for p, k in known]
            known = [(p, k) for p, k in known if math.isfinite(k[-1])]
        if len(known) < 2:  # nothing to learn from: every variant alike
            columns = len(self.knowns) + self.cost_aware
            return [np.zeros((len(variants), columns)) for variants in options]
        features = np.array([self.encode(p, every=True) for p, _ in known])
        flat = [variant for variants in options for variant in variants]
        encoded = np.array([self.encode(v, every=True) for v in flat])
        guesses = []
        for column in np.log10([k for _, k in known]).T:
            mean, std = GaussianProcess.fit(features, column, self.rng).predict(encoded)
            guesses.append(mean - std)
        guessed = np.stack(guesses, axis=1)
        bounds = np.cumsum([0] + [len(variants) for variants in options])
        return [guessed[low:high] for low, high in itertools.pairwise(bounds)]

    def signed_values(self, told: Sequence[FrozenTrial]) -> np.ndarray:
        """The learned objective's told values, negated if minimised: larger is better."""
        sign = Direction(self.space.objectives[self.learned]).sign
        return np.array([sign * self.told(t, self.learned) for t in told])

    def modelled(self, trials: Sequence[FrozenTrial], count: int) -> list[FrozenTrial]:
        """The trials a model learns from: all of them up to `n_modelled`; past it, `count` of
        them: half those nearest the front (`near_front`), a quarter the most recent, the rest a
        seeded draw of the others.

        Why: an exact Gaussian process's fit costs n^3 for n points, so a model of every trial
        would make a long sweep's ask grow without end (minutes at 2,000); a bounded one keeps
        it a fixed cost. The improvement is decided at the front (the candidates are its points'
        changes), the recent points are where the sweep searches now (and beside the running
        ones), and the draw keeps the length scales fitted over the whole space. Studies up to
        `n_modelled` (the quickstart's, the replay benchmark's) ask as every trial's model
        would."""
        if len(trials) <= self.n_modelled:
            return list(trials)
        told = [i for i, t in enumerate(trials) if t.values and self.informative(t)]
        log_known = np.log10(self.told_known([trials[i] for i in told]))
        if log_known.shape[1] == 1:
            log_known = log_known[:, 0]
        front = near_front(self.signed_values([trials[i] for i in told]), log_known, count // 2)
        chosen = dict.fromkeys(told[i] for i in front)
        for i in range(len(trials) - 1, -1, -1):  # the most recent
            if len(chosen) >= count // 2 + count // 4:
                break
            chosen.setdefault(i)
        rest = [i for i in range(len(trials)) if i not in chosen]
        drawn = self.rng.choice(len(rest), size=count - len(chosen), replace=False)
        chosen.update(dict.fromkeys(rest[i] for i in drawn))
        return [trials[i] for i in sorted(chosen)]

    # ---- candidates and their encoding ---------------------------------------------------

    def candidates(self, told: Sequence[FrozenTrial]) -> list[dict[str, Any]]:
        every = self.enumerate()
        if every is not None:
            return every
        drawn = [self.space.sample(RandomDraw(self.rng)) for _ in range(self.n_candidates)]
        bases = [self.space.sample(optuna.trial.FixedTrial(t.params)) for t in told]
        for base in bases:
            for _ in range(max(1, self.n_candidates // (4 * max(1, len(bases))))):
                drawn.append(self.mutate(base))
        return drawn

    def enumerate(self) -> list[dict[str, Any]] | None:
        """Every point of an all-choice space no larger than `n_candidates`, else None."""
        params = self.space.params
        if any(p.kind != "choice" for p in params):
            return None
        if math.prod(len(p.values) for p in params) > self.n_candidates:
            return None
        points = {}
        for values in itertools.product(*(p.values for p in params)):
            full = {p.name: v for p, v in zip(params, values)}
            point = self.space.sample(optuna.trial.FixedTrial(full))
            points.setdefault(point_key(point), point)
        return list(points.values())

    def mutate(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """`base` with one or two params drawn anew (conditions applied again)."""
        changed = set(self.rng.choice(len(self.space.params), size=2, replace=True).tolist())
        draw = RandomDraw(self.rng)
        fixed = dict(base)
        for i in changed:
            param = self.space.params[i]
            fixed[param.name] = param.suggest(draw)
        return self.space.sample(Completing(fixed, draw))

    def encode(self, params: Mapping[str, Any], every: bool = False) -> list[float]:
        """The features the learned objective depends on: exact values read as absent (unless
        `every`: the memory model's features)."""
        return [
            x
            for p in self.space.params
            for x in encode_param(
                p,
                params.get(p.name, MISSING)
                if every
                else trained_value(p.name, params.get(p.name, MISSING)),
            )
        ]


MISSING = object()
Weighed = tuple[int, np.ndarray, dict[str, Any]]  # an option's index, known objectives, variant
# (indices of an ask's options, their log known objectives) -> each one's acquisition value
Improvement = Callable[[np.ndarray, np.ndarray], np.ndarray]


def reference_log_memory(memories: np.ndarray, log_memory: np.ndarray) -> np.ndarray | float:
    """The hypervolume's bound in each log known objective: 1.1x the largest told or weighed
    (one number for a single column of `memories`, else one a column)."""
    told, weighed = np.log10(np.max(memories, axis=0)), np.max(log_memory, axis=0)
    bound = np.log10(1.1) + np.maximum(told, weighed)
    return float(bound) if np.ndim(bound) == 0 else bound


def per_finished_trial(
    cache: dict[int, tuple[FrozenTrial, Any]], trial: FrozenTrial, fact: Callable
) -> Any:
    """`fact(trial)`, kept in `cache` once the trial is finished (its params and values are then
    final, and the study hands back the same object at every ask): an ask reads every trial of
    the study, so a long sweep's ask would otherwise grow with it."""
    held = cache.get(id(trial))
    if held is not None and held[0] is trial:
        return held[1]
    value = fact(trial)
    if trial.state.is_finished():
        cache[id(trial)] = (trial, value)
    return value


def trained_value(name: str, value: Any) -> Any:
    """A param's value as training sees it: an exact one (`exact.exact_values`) as absent."""
    return MISSING if value is not MISSING and exact(name, value) else value


def encode_param(param: Param, value: Any) -> list[float]:
    """[0, 1] features of one param: its position in its range (log where the range or a
    numeric choice is logarithmic), a choice declared ordered at its rank (`Param.order`), or a
    one-hot of an unordered choice."""
    order = param.order() if len(param.values) > 1 else None
    if param.kind == "choice" and order is None:
        return [float(value is not MISSING and value == v) for v in param.values]
    if value is MISSING:
        return [0.5]
    if param.ordered:  # the order the space declares
        return [order.index(value) / (len(order) - 1)]
    low, high = (
        (min(param.values), max(param.values))
        if param.kind == "choice"
        else (
            param.low,
            param.high,
        )
    )
    logarithmic = param.kind == "loguniform" or (param.kind == "choice" and low > 0)
    if logarithmic:
        value, low, high = np.log(value), np.log(low), np.log(high)
    return [0.5 if high == low else float((value - low) / (high - low))]


def point_key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=str)


def distribution(param: Param) -> BaseDistribution:
    """The Optuna distribution `Param.suggest` asks for."""
    if param.kind == "choice":
        return CategoricalDistribution(list(param.values))
    if param.kind == "int":
        return IntDistribution(param.low, param.high, step=param.step or 1)
    return FloatDistribution(param.low, param.high, step=param.step, log=param.kind == "loguniform")


class RandomDraw:
    """A stand-in for an Optuna trial that draws every suggested value at random (uniform,
    log-uniform for a log range): `SearchSpace.sample` applies the conditions."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return choices[int(self.rng.integers(len(choices)))]

    def suggest_int(self, name: str, low: int, high: int, step: int = 1) -> int:
        return int(low + step * self.rng.integers((high - low) // step + 1))

    def suggest_float(
        self, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        if log:
            return float(np.exp(self.rng.uniform(np.log(low), np.log(high))))
        if step is not None:
            return float(low + step * self.rng.integers(round((high - low) / step) + 1))
        return float(self.rng.uniform(low, high))


class Completing(RandomDraw):
    """Fixed values where given, random draws for the rest (a param a change made active)."""

    def __init__(self, fixed: Mapping[str, Any], draw: RandomDraw):
        super().__init__(draw.rng)
        self.fixed = fixed

    def suggest_categorical(self, name, choices):
        return (
            self.fixed[name] if name in self.fixed else super().suggest_categorical(name, choices)
        )

    def suggest_int(self, name, low, high, step=1):
        return (
            self.fixed[name] if name in self.fixed else super().suggest_int(name, low, high, step)
        )

    def suggest_float(self, name, low, high, step=None, log=False):
        if name in self.fixed:
            return self.fixed[name]
        return super().suggest_float(name, low, high, step, log)


def front_points(values: np.ndarray, log_memory: np.ndarray) -> list[tuple[float, float]]:
    """The non-dominated (log memory, value) pairs, value maximised, memory minimised, by
    increasing memory (and so increasing value)."""
    return [(float(log_memory[i]), float(values[i])) for i in front_indices(values, log_memory)]


def front_indices(values: np.ndarray, log_memory: np.ndarray) -> list[int]:
    """The indices of `front_points`' pairs, in its order (of equal pairs, the first); with
    several known objectives (`log_memory` a row each), of the points no other is as good as
    in all of them and better in one, by their first."""
    if np.ndim(log_memory) == 2:
        return dominance_front(np.asarray(values), np.asarray(log_memory))
    front: list[int] = []
    for i in np.lexsort((-np.asarray(values), np.asarray(log_memory))).tolist():
        if not front or values[i] > values[front[-1]]:
            front.append(i)
    return front


def dominance_front(values: np.ndarray, log_known: np.ndarray) -> list[int]:
    """The non-dominated points of (value maximised, each known objective minimised), by their
    first known objective (of equal points, the first)."""
    points = np.column_stack([-values, log_known])
    front: list[int] = []
    for i in np.lexsort((-values, *log_known.T[::-1])).tolist():
        if not any((points[j] <= points[i]).all() for j in front):
            front.append(i)
    return front


def near_front(values: np.ndarray, log_memory: np.ndarray, count: int) -> list[int]:
    """The indices of `count` points (all, if fewer) nearest the front: its non-dominated layers,
    the front first, then the front of the rest, and so on; of the layer that does not fit whole,
    points evenly spaced along it (its ends kept)."""
    left, chosen = np.arange(len(values)), []
    while left.size and len(chosen) < count:
        layer = left[front_indices(values[left], log_memory[left])]
        room = count - len(chosen)
        if len(layer) > room:
            layer = layer[np.linspace(0, len(layer) - 1, room).round().astype(int)]
        chosen += layer.tolist()
        left = np.setdiff1d(left, layer)
    return chosen


def expected_improvement(
    mean: np.ndarray,
    std: np.ndarray,
    log_memory: np.ndarray,
    front: Sequence[tuple[float, float]],
    reference: tuple[float, float],
) -> np.ndarray:
    """Expected hypervolume improvement of candidates whose value is N(mean, std^2) (maximised)
    and whose log memory is known (minimised), over `front` (as `front_points` gives it), with
    the hypervolume bounded by `reference` (least value, largest log memory).

    A candidate at memory m with value y adds, over every memory t in [m, reference), the height
    y - h(t) where positive, h(t) being the best front value at memory <= t (or the reference's):
    h is a step function, so E[gain] = sum over its steps of width * E[(y - h)^+], and
    E[(y - h)^+] = (mean - h) Phi(z) + std phi(z), z = (mean - h) / std."""
    floor, ceiling = reference
    kept = [(m, v) for m, v in front if m < ceiling]
    # step j spans [left_j, right_j) at height heights_j: below the first front point, then
    # from each front point to the next (the last to the ceiling)
    left = np.array([-np.inf] + [m for m, _ in kept])
    right = np.array([m for m, _ in kept] + [ceiling])
    heights = np.array([floor] + [max(floor, v) for _, v in kept])
    start = np.asarray(log_memory, float)[:, None]
    widths = np.clip(np.minimum(right, ceiling) - np.maximum(left, start), 0.0, None)
    mean, std = np.asarray(mean, float)[:, None], np.asarray(std, float)[:, None]
    z = (mean - heights) / std
    expected = (mean - heights) * ndtr(z) + std * np.exp(-0.5 * z**2) / np.sqrt(2.0 * np.pi)
    return np.sum(widths * expected, axis=1)


def expected_improvement_known(
    mean: np.ndarray,
    std: np.ndarray,
    log_known: np.ndarray,
    front: tuple[np.ndarray, np.ndarray],
    reference: tuple[float, np.ndarray],
) -> np.ndarray:
    """`expected_improvement` with several known objectives: candidates whose value is
    N(mean, std^2) (maximised) and whose log known objectives are the rows of `log_known`
    (minimised), over `front` (its values, its log known objectives a row each), the
    hypervolume bounded by `reference` (least value, largest log of each known objective).

    The known objectives' space is cut into cells at the front's coordinates; over each cell the
    best value of a front point at or below it in every known objective is one height h, so a
    candidate adds, over the part of each cell at or above it, its volume times (y - h)^+:
    E[gain] = sum over cells of volume * E[(y - h)^+], as in one dimension (the steps there)."""
    floor, ceiling = reference
    values, known = front
    inside = (known < ceiling).all(axis=1)
    values, known = values[inside], known[inside]
    # per known objective, each cell's [left, right): below the front's first coordinate, then
    # from each to the next (the last to the ceiling)
    cuts = [np.unique(known[:, d]) for d in range(len(ceiling))]
    lefts = [np.concatenate([[-np.inf], c]) for c in cuts]
    rights = [np.concatenate([c, [bound]]) for c, bound in zip(cuts, ceiling)]
    corners = np.stack([g.ravel() for g in np.meshgrid(*lefts, indexing="ij")], axis=1)
    below = (known[None, :, :] <= corners[:, None, :]).all(axis=2)  # front point under a cell
    heights = np.where(below, values[None, :], -np.inf).max(axis=1, initial=floor)
    start = np.asarray(log_known, float)
    cell = np.indices([len(left) for left in lefts]).reshape(len(lefts), -1)  # per objective
    volume = np.ones((len(start), len(corners)))
    for d, (left, right) in enumerate(zip(lefts, rights)):
        widths = np.clip(right - np.maximum(left, start[:, d : d + 1]), 0.0, None)
        volume *= widths[:, cell[d]]
    mean, std = np.asarray(mean, float)[:, None], np.asarray(std, float)[:, None]
    z = (mean - heights) / std
    expected = (mean - heights) * ndtr(z) + std * np.exp(-0.5 * z**2) / np.sqrt(2.0 * np.pi)
    return np.sum(volume * expected, axis=1)
