"""tune-lowmem: search the memory/accuracy trade-offs of training a network.

The Python API (`tune_lowmem.api`, documented in docs/python-api.md)::

    import tune_lowmem
    runs = tune_lowmem.open_store("runs")
    runs.front("quickstart"), runs.best_config(3.0, "quickstart")
    tune_lowmem.launch("search_spaces/quickstart.yaml", store="runs").front

Its names load on first use, so importing a submodule (a technique, the config) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import SpaceUnreadable, Store, SweepStatus, launch, open_store, resume

__all__ = ["SpaceUnreadable", "Store", "SweepStatus", "launch", "open_store", "resume"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'tune_lowmem' has no attribute {name!r}")
