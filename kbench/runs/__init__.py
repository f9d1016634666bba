"""Run folders: the journal and its rows, the typed manifest, atomic writes, the run lock, resume checks, merge
of shards, output-path checks, signal handling, and the winners of a run's cases (ties within spreads).
"""
