"""One-batch benchmark of a live SGLang or vLLM server (SGLang's bench_one_batch_server, comparable numbers).

    from kbench.server import ServerBenchConfig, run_server_bench
    result = run_server_bench(ServerBenchConfig(url="http://127.0.0.1:30000", batch_sizes=(1, 8)))

Modules: client (HTTP, bounded SSE, flush with retry), backends (sglang/vllm protocol), metrics (the stream's
timings and SGLang's metric definitions), rows (the row and its JSON line), bench (the case loop).
"""
from kbench.server.bench import (Listener, ServerBenchConfig, ServerBenchInterrupted, ServerBenchResult, ServerCase,
                                 run_server_bench)
from kbench.server.rows import ServerBenchRow

__all__ = ["Listener", "ServerBenchConfig", "ServerBenchInterrupted", "ServerBenchResult", "ServerBenchRow",
           "ServerCase", "run_server_bench"]
