"""One-batch benchmark of a live SGLang or vLLM server (SGLang's bench_one_batch_server, comparable numbers).

    from kbench.server import ServerBenchConfig, run_server_bench
    result = run_server_bench(ServerBenchConfig(url="http://127.0.0.1:30000", batch_sizes=(1, 8)))

Modules: client (HTTP, bounded SSE, flush with retry), backends (sglang/vllm protocol), metrics (the stream's
timings and SGLang's metric definitions), counters (the server's /metrics: cache hit rate, spec acceptance),
prompts (random or repeated-pattern token ids), summary (SGLang's markdown report), bench (the case loop), rows
(the row and its JSON line; the run kind "server-bench"). The A/B answer of two server runs is the gate's
(kbench.gate.ab).
"""
__all__ = ["Listener", "ServerBenchConfig", "ServerBenchInterrupted", "ServerBenchResult", "ServerBenchRow",
           "ServerCase", "run_server_bench"]


def __getattr__(name: str):
    """Loaded on first use (PEP 562): importing kbench.server must not pull in the HTTP client."""
    if name == "ServerBenchRow":
        from kbench.server.rows import ServerBenchRow

        return ServerBenchRow
    if name in __all__:
        from kbench.server import bench

        return getattr(bench, name)
    raise AttributeError(f"module 'kbench.server' has no attribute {name!r}")
