"""kbench: which attention kernel should serve speculative decoding's short-query extend batches.

The engine is usable without the CLI::

    from kbench import load_scenario, run_sweep
    run = run_sweep(load_scenario("quick"), out_dir="results")
"""
__version__ = "0.1.0"

RESULT_SCHEMA_VERSION = 1
