"""The `sparsity` section of a trial's config: dynamic sparse reparameterization's settings, apart
from the technique's torch code so the config and the store read them without torch."""

from __future__ import annotations

from dataclasses import dataclass

from ..validation import choice, fraction, positive_float, positive_int
from .setting import Setting

REWIRING_MODES = ("dynamic", "static")
PERIOD_SCHEDULES = ("paper", "constant")
SCHEDULE_UNITS = ("relative", "absolute")
# how the accounted memory counts a sparse weight (techniques.sparsity.sparse_storage_bytes)
STORAGE_LAYOUTS = ("csr", "bitmap", "best")


@dataclass(frozen=True)
class SparsityConfig:
    """Dynamic sparse reparameterization (Mostafa & Wang 2019), as the paper trains it."""

    density: float = 1.0  # fraction of nonzeros in the sparse layers; 1.0 = dense
    rewiring: str = "dynamic"  # dynamic: prune and regrow; static: a fixed random mask
    period_schedule: str = "paper"  # paper: 100/200/400/800 iterations from epochs 0/25/80/140
    constant_period: int = 100  # iterations between rewirings when period_schedule is constant
    period_multiplier: float = 1.0  # scales the rewiring period (paper searches 0.125..4)
    fraction_multiplier: float = 1.0  # scales the rewiring fraction (paper searches 0.25..8)
    fraction: float | None = None  # Np as a fraction of sparse params; None: the paper's WRN value
    initial_threshold: float = 1e-3  # the adaptive global pruning threshold H at the start
    stop_epoch: float = 0.95  # rewiring stops at this fraction of training (paper: 190 of 200)
    # relative: the paper's periods and boundaries as fractions of the run's updates (exactly the
    # paper's at 200 epochs x 450 updates); absolute: periods in updates, boundaries in scaled
    # epochs, so short runs rewire rarely or never. See techniques/rewiring.py.
    schedule_units: str = "relative"
    # what the accounted memory (the objective) counts a sparse weight as: csr (the paper's),
    # bitmap (values and one bit per position), or best (the smaller, per weight)
    storage: str = "csr"

    def validate(self, prefix: str) -> None:
        fraction(self.density, f"{prefix}.density")
        choice(self.rewiring, REWIRING_MODES, f"{prefix}.rewiring")
        choice(self.period_schedule, PERIOD_SCHEDULES, f"{prefix}.period_schedule")
        positive_int(self.constant_period, f"{prefix}.constant_period")
        positive_float(self.period_multiplier, f"{prefix}.period_multiplier")
        positive_float(self.fraction_multiplier, f"{prefix}.fraction_multiplier")
        if self.fraction is not None:
            fraction(self.fraction, f"{prefix}.fraction")
        positive_float(self.initial_threshold, f"{prefix}.initial_threshold")
        fraction(self.stop_epoch, f"{prefix}.stop_epoch", open_low=False)
        choice(self.schedule_units, SCHEDULE_UNITS, f"{prefix}.schedule_units")
        choice(self.storage, STORAGE_LAYOUTS, f"{prefix}.storage")

    @property
    def enabled(self) -> bool:
        return self.density < 1.0


# What `techniques.sparsity.Sparsity` declares as its SETTINGS. The first stores lacked two
# columns: their rows scaled only the rewiring boundaries, and counted sparse weights as CSR.
SETTINGS = (
    Setting(
        "sparsity",
        SparsityConfig,
        older_stores={"sparsity.schedule_units": "absolute", "sparsity.storage": "csr"},
    ),
)
