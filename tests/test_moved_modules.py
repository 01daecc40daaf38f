"""Sweeps launched before a module moved pickle its objects under the module's old name; a
resumed sweep reads them as today's objects (`search.legacy.old_module_names`)."""

from __future__ import annotations

import importlib
import inspect
import pickle
from pathlib import Path

import pytest

import tune_lowmem
from tune_lowmem.search import legacy


def defined_in(module_name: str) -> object:
    """A class or function the module itself defines (what a pickle names it by)."""
    module = importlib.import_module(module_name)
    for _, value in inspect.getmembers(
        module, lambda v: inspect.isclass(v) or inspect.isfunction(v)
    ):
        if value.__module__ == module_name:
            return value
    raise AssertionError(f"{module_name} defines nothing picklable by name")


@pytest.mark.parametrize("old, new", sorted(legacy.MOVED_MODULES.items()))
def test_an_object_pickled_under_its_modules_old_name_unpickles_as_todays(old, new):
    obj = defined_in(new)
    pickled = pickle.dumps(obj, protocol=0)
    before = pickled.replace(new.encode() + b"\n", old.encode() + b"\n")
    assert before != pickled
    legacy.old_module_names()
    assert pickle.loads(before) is obj


def test_no_module_stands_at_an_old_name_or_two_would_answer_to_it():
    """An old name is an alias only: a file left there would be imported in its place."""
    root = Path(tune_lowmem.__file__).parent.parent
    for old in legacy.MOVED_MODULES:
        where = root.joinpath(*old.split("."))
        assert not where.with_suffix(".py").exists() and not where.is_dir(), old
