"""The memory techniques, each a small unit applied to a model (`base.Technique`) that owns its
fields of `TrialConfig` (`setting.Setting`); none imports Ray, a model or a task module. The
registry (`tune_lowmem.plugins`) lists them, built-in and installed; this package's top imports
none of them, since the config layer asks the registry for their settings."""
