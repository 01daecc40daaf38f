"""The CUDA libraries' workspaces as a trial's setting (`settings.CudaWorkspaceConfig`): cuBLAS's
per handle and stream (CUBLAS_WORKSPACE_CONFIG) and the cap on a convolution's cuDNN workspace
(CUDNN_CONV_WSCAP_DBG), both on torch's "CUDA Environment Variables" page. Less workspace is
less memory, and kernels that may be slower (a trial's time says how much).

torch reads them from the trial's process environment when a library first takes a workspace,
so they are set there before CUDA starts (`environment`, which `train.apply_environment` sets
in the trainable first thing and in `train`); the memory prediction counts the workspaces they
give (`memory.cuda_libraries`). They change which kernels run, not what a step computes beyond
rounding, so points that differ only in them train alike (`EXACT`)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..validation import ConfigError
from . import settings
from .base import EVERY, Technique

SETTINGS_OF = {"cublas": "CUBLAS_WORKSPACE_CONFIG", "cudnn_limit_mb": "CUDNN_CONV_WSCAP_DBG"}


class CudaWorkspace(Technique):
    """The `cuda_workspace` section: what it sets in the trial's environment."""

    NAME = "cuda_workspace"
    SETTINGS = settings.CUDA_WORKSPACE
    EXACT: ClassVar = {f"cuda_workspace.{name}": EVERY for name in SETTINGS_OF}
    ENVIRONMENT: ClassVar = tuple(f"cuda_workspace.{name}" for name in SETTINGS_OF)

    @classmethod
    def enabled(cls, config) -> bool:
        return bool(cls.environment(config))

    @classmethod
    def validate(cls, config, task) -> None:
        """Each field checks its own value (`CudaWorkspaceConfig.validate`); nothing depends on
        the task."""

    @classmethod
    def shape_settings(cls, config) -> dict[str, Any]:
        """Workspaces are no tensor's: the dry run is the same; `memory.cuda` adds them."""
        return {}

    @classmethod
    def check_space(cls, probes, base, limit) -> None:
        """A space of CPU trials that searches a workspace setting searches nothing."""
        searched = sorted(p for p in probes if p.startswith(f"{cls.NAME}."))
        if searched and base.get("device") == "cpu":
            raise ConfigError(
                searched[0],
                "searched with device cpu, where it does nothing; device cuda or "
                "auto (with a GPU in resources) is required",
            )

    @classmethod
    def environment(cls, config) -> dict[str, str]:
        """The environment variables a trial of `config` runs with (none left at default)."""
        section = config.cuda_workspace
        values = {name: getattr(section, name) for name in SETTINGS_OF}
        return {SETTINGS_OF[k]: str(v) for k, v in values.items() if v is not None}
