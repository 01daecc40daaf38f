"""What a search space's params must satisfy beside each other and the base: its
``conditions`` section (a param sampled only when an earlier param's value allows it), and the
costly proofs over the configs the sweep can run (each value valid, a validation split where an
objective needs one, each technique's own knobs). The space reads the section and runs the
proofs through this module; the distributions they reason about are `params.Param`s."""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, TrialConfig
from ..plugins import techniques
from ..tasks import TASKS
from ..validation import is_number, require
from ..yaml_loading import load_text
from .params import Param

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "not in": lambda a, b: a not in b,
    "in": lambda a, b: a in b,
}
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|!=|<|>|not in|in)\s*(.+?)\s*$")
_PROBE_COMBINATIONS = 256  # other params' probe values tried before a value is declared impossible


@dataclass(frozen=True)
class Condition:
    """``child`` is sampled only when ``parent <op> value`` holds for the sampled parent."""

    parent: str
    op: str
    value: Any
    text: str

    def holds(self, parent_value: Any) -> bool:
        return bool(_OPERATORS[self.op](parent_value, self.value))


# ---- the conditions section: decided by the distributions alone ------------------------------


def conditions(raw: dict[str, Any], params: tuple[Param, ...]) -> dict[str, Condition]:
    """Child param -> its condition: each on a param listed before it, and able to hold."""
    order = {p.name: i for i, p in enumerate(params)}
    by_name = {p.name: p for p in params}
    found = {}
    for child, text in raw.items():
        prefix = f"conditions.{child}"
        require(child in order, prefix, f"not a searched param; params: {', '.join(order)}")
        match = _CONDITION.match(text) if isinstance(text, str) else None
        require(
            match is not None,
            prefix,
            f"{text!r} is not allowed; 'PARAM OP VALUE' with OP one of {', '.join(_OPERATORS)} is required",
        )
        parent, op, value_text = match.groups()
        require(
            parent in order and order[parent] < order[child],
            prefix,
            f"{parent!r} is not allowed; a param listed before {child} in params is required",
        )
        condition = Condition(parent, op, load_text(value_text, prefix), text)
        probes = _condition_probes(by_name[parent], condition.value)
        try:
            truths = [condition.holds(v) for v in probes]
        except TypeError:
            raise ConfigError(
                prefix,
                f"{text!r} cannot compare {parent}'s values {probes!r} with {condition.value!r}",
            ) from None
        require(
            any(truths),
            prefix,
            f"{text!r} can never hold: {parent} takes {_describe_values(by_name[parent])}",
        )
        found[child] = condition
    return found


def _condition_probes(param: Param, value: Any) -> list[Any]:
    """Values of `param` that decide whether a condition on it can ever hold: every choice, or a
    range's ends and the condition's own values that lie in it (on the step grid)."""
    if param.kind == "choice":
        return param.probes()
    inside = [
        v
        for v in (value if isinstance(value, list) else [value])
        if is_number(v)
        and param.low <= v <= param.high
        and (
            param.kind != "int"
            or (float(v).is_integer() and (v - param.low) % (param.step or 1) == 0)
        )
    ]
    return [param.low, param.high, *inside]


def _describe_values(param: Param) -> str:
    if param.kind == "choice":
        return f"only {list(param.values)!r}"
    return f"values in [{param.low!r}, {param.high!r}]"


# ---- the proofs over the configs the sweep can run: last, as they cost the most --------------


def proofs(params: tuple[Param, ...], base: dict[str, Any], objectives: Mapping[str, str]) -> None:
    """The costly proofs over the configs the sweep can run, each built once: every probe
    value valid, a validation split wherever a val_* objective needs one, and last what each
    technique's own knobs need of a space."""
    alone = _probe(params, base)
    tries = [("base", {}, TrialConfig.from_dict(base))]
    # a data value valid only beside other params' values is `_probe`'s to judge
    tries += [(f"params.{n}", {n: v}, c) for (n, v), c in alone.items() if n.startswith("data.")]
    _validation_split(objectives, base["task"], tries)
    probes = {p.name: p.probes() for p in params}
    for technique in techniques():
        technique.check_space(probes, base, _PROBE_COMBINATIONS)


def _probe(params: tuple[Param, ...], base: dict[str, Any]) -> dict[tuple[str, Any], TrialConfig]:
    """Each probe value must give a valid config, alone over the base or with some values of
    the other params (those valid alone: one other param's first, then combinations), so that
    no value can only ever fail. The configs of the values valid alone, by (param, value)."""
    alone = {
        (p.name, v): TrialConfig.attempt({**base, p.name: v}) for p in params for v in p.probes()
    }
    valid = {key: built for key, built in alone.items() if isinstance(built, TrialConfig)}
    refused = {key: error for key, error in alone.items() if key not in valid}
    for (name, value), error in refused.items():
        others = [
            [(o.name, v) for v in o.probes() if (o.name, v) in valid]
            for o in params
            if o.name != name
        ]
        pairs = ([pair] for values in others for pair in values)
        combos = itertools.chain(
            pairs, itertools.islice(itertools.product(*others), _PROBE_COMBINATIONS)
        )
        tried = (TrialConfig.attempt({**base, **dict(c), name: value}) for c in combos)
        if all(isinstance(config, ConfigError) for config in tried):
            raise ConfigError(f"params.{name}", f"{value!r} gives no valid config: {error}")
    return valid


def _validation_split(
    objectives: Mapping[str, str],
    task_name: str,
    tries: list[tuple[str, dict[str, Any], TrialConfig]],
) -> None:
    """A val_* objective needs a validation split in every config the sweep can run: `tries`
    are (field, its values over the base, the config they give)."""
    needs = [m for m in objectives if m.startswith("val_")]
    if not needs:
        return
    task = TASKS.get(task_name)
    for field_name, change, config in tries:
        if task.validation_empty(config):
            shown = ", ".join(f"{k}={v!r}" for k, v in change.items()) or "the base data section"
            raise ConfigError(
                field_name,
                f"{shown} leaves no validation split, so objective {needs[0]} "
                "can never be measured; hold out data (data.val_size > 0, data.split: search)",
            )
