"""kbench: which attention kernel should serve speculative decoding's short-query extend batches.

The engine is usable without the CLI::

    from kbench.cases.scenario import load_scenario
    from kbench.engine.sweep import run_sweep
    result = run_sweep(load_scenario("quick"), out_dir="results")

The folders are the layers, low to high: timing, cases, kernels and runs, engine, report and server, gate, cli
(tests/import_graph.py enforces them). This package's own modules are what every layer shares: errors, values,
device (the DeviceInfo a kernel's supports() reads).
"""
__version__ = "0.1.0"

RESULT_SCHEMA_VERSION = 1
