"""The Parquet store: one file per trial, so every result is in it exactly once.

Layout under a store root ``DIR``::

    DIR/trials/sweep=<name>/<trial_id>.parquet   one row: the trial's config, final metrics, memory,
                                                 time
    DIR/epochs/sweep=<name>/<trial_id>.parquet   one row per epoch of that trial: its metrics, time
    DIR/models/sweep=<name>/<trial_id>.pt        the final weights of a completed trial: a plain
                                                 torch state_dict (`torch.load(..., weights_only=True)`)

Both tables are Hive-partitioned Parquet datasets that need nothing of this project to read::

    pandas.read_parquet("DIR/trials")
    pyarrow.dataset.dataset("DIR/trials", partitioning="hive")
    duckdb: SELECT * FROM read_parquet('DIR/trials/*/*.parquet', hive_partitioning=true,
                                       union_by_name=true)

Translation trials' `metric.val_bleu` / `metric.test_bleu` are tokenised BLEU (BPE removed,
text still Moses-tokenised and lower-cased, as fairseq-generate --remove-bpe and the paper score
it); `metric.*_sacrebleu` (stores from this version on) are detokenised sacreBLEU, signature
`tune_lowmem.tasks.translation.decode.sacrebleu_signature()` with `version.sacrebleu`.

``sweep`` is the partition key and lives in the path only (a copy inside the files would clash
with it in pyarrow). Config columns have the types of the `TrialConfig` fields, so every trial
of one task has the same config columns whatever its values. Metric columns follow what each
trial reported; when they differ between trials, pandas and pyarrow take the first file's
columns, so read with `read_trials` (or DuckDB's ``union_by_name``) to get the union.

Concurrent trials never write the same file; a trial written again replaces its own file
atomically (a hidden temporary file in the same folder, fsync, `os.replace`), so a reader sees
the old row or the new one, never half a file, and a crash leaves at most a hidden temporary
file that every reader skips.

Thousands of one-row files are slow to open, so `compact` merges a sweep's files into one
``+compacted-<time>-<id>.parquet`` (a name no trial id can take) the way table formats compact
small files: it writes the merged file atomically first and only then removes the files it holds.
A crash in between leaves a row in two files, and the readers keep one copy per trial id (its
own file before a compacted one, the newest compacted one before older ones), so no row is ever
lost or read twice; a trial file rewritten while compaction runs is kept, not removed.

Column groups: ``config.*`` (the `TrialConfig`), ``metric.*`` (what the task reported),
``memory.*`` and ``time.*`` (the outcome columns `tune_lowmem.outcome` declares), ``version.*``.

Modules: `records` (the row's columns and types, `TrialRecord` and the `SweepRows` that build
it from what a trial reported, errors), `write` (atomic
writes), `read` (tolerant reads), `compat` (how stores of earlier versions read: every rule for
older rows), `compaction` (merging as a sweep goes). The names
below are the store's interface; import them from here.
"""

from .compaction import COMPACT_CHUNK, COMPACT_MAX_PARTS, COMPACT_MIN_FILES, compact
from .compat import REMOVED_FIELDS, later_fields
from .read import config_values, list_sweeps, read_epochs, read_trials, trial_config, trial_ids
from .records import (
    EPOCHS,
    MEMORY_COLUMNS,
    MODELS,
    OUTCOME_TYPES,
    QUARANTINE,
    SCHEMA_VERSION,
    STATUSES,
    TIME_COLUMNS,
    TRIALS,
    VERSIONED_PACKAGES,
    StoreError,
    SweepRows,
    TrialRecord,
    WriteFailed,
    check_name,
    forget_reported_files,
    note_once,
)
from .write import model_file, write_model, write_trial

__all__ = [
    "COMPACT_CHUNK",
    "COMPACT_MAX_PARTS",
    "COMPACT_MIN_FILES",
    "EPOCHS",
    "MEMORY_COLUMNS",
    "MODELS",
    "OUTCOME_TYPES",
    "QUARANTINE",
    "REMOVED_FIELDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "TIME_COLUMNS",
    "TRIALS",
    "VERSIONED_PACKAGES",
    "StoreError",
    "SweepRows",
    "TrialRecord",
    "WriteFailed",
    "check_name",
    "compact",
    "config_values",
    "forget_reported_files",
    "later_fields",
    "list_sweeps",
    "model_file",
    "note_once",
    "read_epochs",
    "read_trials",
    "trial_config",
    "trial_ids",
    "write_model",
    "write_trial",
]
