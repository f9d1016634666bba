"""The sweep engine: a scenario's cases measured (inputs, reference, check, timing) in this process, an
isolated worker or one worker per GPU, with the JIT modules compiled first; the full-grid and adaptive plans;
validate-timer. Usable from Python without the CLI: ``from kbench.engine.sweep import run_sweep``.
"""
