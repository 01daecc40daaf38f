"""The memory techniques, each a small unit applied to a model (`base.Technique`) that owns its
fields of `TrialConfig` (`setting.Setting`); none imports Ray, a model or a task module.
`registry` lists them, built-in and installed; this package's top imports none of them, since
the config layer asks the registry for their settings."""

from .registry import BUILTIN_TECHNIQUES, ENTRY_POINT_GROUP, registered, settings
from .setting import Setting

__all__ = ["BUILTIN_TECHNIQUES", "ENTRY_POINT_GROUP", "Setting", "registered", "settings"]
