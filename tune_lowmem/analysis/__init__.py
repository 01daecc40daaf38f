"""Reading a sweep's results back from the Parquet store: the seed-averaged configurations
(`points`), the Pareto query behind `tune-lowmem pareto` (`query`), and the paper's figures and
Table 3 behind `tune-lowmem report` (`report`, one module per figure kind)."""
