"""kbench: which attention kernel should serve speculative decoding's short-query extend batches.

The engine is usable without the CLI, a command each::

    from kbench.cases.scenario import load_scenario, apply_overrides
    from kbench.engine.sweep import run_sweep, resume_sweep          # kbench sweep, sweep --resume
    result = run_sweep(apply_overrides(load_scenario("quick"), batch_size="1,16"), out_dir="results")
    result.outcome(), result.exit_code()                              # ok | interrupted | wrong | ...
    from kbench.runs.store import load_run                            # a run's rows (pandas) and manifest
    from kbench.report import build_report, lookup                    # kbench report, kbench select
    from kbench.gate import run_gate, write_multi_baseline            # kbench gate, kbench baseline
    from kbench.recommend import recommend_for                        # kbench recommend
    from kbench.recommend.export import export_policy                 # kbench export
    from kbench.runs.merge import merge_runs                          # kbench merge
    from kbench.server import ServerBenchConfig, run_server_bench     # kbench server-bench
    from kbench.engine.prebuild import prebuild, load_archive        # kbench prebuild, prebuild --load
    from kbench.engine.jit_cache import use_jit_cache                # --jit-cache (before FlashInfer loads)
    from kbench.engine.environment import environment                # kbench env --json

Bad input is kbench.errors.BadInput everywhere, with the line the command would print.

The folders are the layers, low to high: timing, cases, kernels and runs, engine, report and server, gate, cli
(tests/import_graph.py enforces them). This package's own modules are what every layer shares: errors, values,
device (the DeviceInfo a kernel's supports() reads).
"""
__version__ = "0.1.0"

RESULT_SCHEMA_VERSION = 1
