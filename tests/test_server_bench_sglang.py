"""server-bench takes SGLang's command line (range syntax, space-separated lists, hidden aliases) and writes
SGLang's fields (issue #14). Its unwritable outputs: test_outputs.py; SIGTERM: test_signals.py; --resume:
test_resume.py; its --help: test_help.py.

The SGLang-protocol test server (tests/servers/fake_sglang.py) stands in where only the request/flag plumbing
is under test; what the numbers mean is proven on the real CPU vLLM (test_server_bench_vllm.py)."""
from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, fields
from typing import Optional

import pytest
from click.testing import CliRunner

from kbench.cli.server_bench_cmd import join_space_lists  # noqa: E402
from kbench.server import ServerBenchConfig, run_server_bench  # noqa: E402
from kbench.server.counters import case_counters, parse_counters  # noqa: E402
from kbench.server.prompts import parse_prompt_pattern  # noqa: E402
from kbench.runs.store import load_run  # noqa: E402


@dataclass
class BenchOneCaseResult:
    """SGLang's result model (python/sglang/bench_one_batch_server.py, the version with --cache-hit-rate):
    the field names and types, transcribed. parse() is pydantic's strictness for these types."""
    run_name: str
    batch_size: int
    input_len: int
    output_len: int
    latency: float
    input_throughput: float
    output_throughput: float
    overall_throughput: float
    last_ttft: float
    last_gen_throughput: float
    acc_length: float
    cache_hit_rate: Optional[float] = None
    profile_link: Optional[str] = None

    @classmethod
    def parse(cls, line: str) -> "BenchOneCaseResult":
        data = json.loads(line)
        hints = typing.get_type_hints(cls)
        known = {f.name for f in fields(cls)}
        assert set(data) <= known, f"fields SGLang's model does not have: {set(data) - known}"
        for f in fields(cls):
            if f.name not in data:
                assert f.default is None, f"required field {f.name} missing"
                continue
            v, t = data[f.name], hints[f.name]
            if t is Optional[float] or t is Optional[str]:
                if v is None:
                    continue
                t = float if t is Optional[float] else str
            if t is float:
                assert isinstance(v, (int, float)) and not isinstance(v, bool), (f.name, v)
            elif t is int:
                assert isinstance(v, int) and not isinstance(v, bool), (f.name, v)
            else:
                assert isinstance(v, t), (f.name, v)
        return cls(**data)


def cli():
    from kbench.cli.main import cli as group
    return group


def invoke(*args, env=None):
    return CliRunner().invoke(cli(), ["server-bench", *map(str, args)], env=env)


# ---- SGLang's command line ---------------------------------------------------------------------------------

def test_space_separated_lists_become_one_value():
    assert join_space_lists(["--batch-size", "1", "4", "--input-len", "600", "--skip-warmup"]) == [
        "--batch-size", "1,4", "--input-len", "600", "--skip-warmup"]
    assert join_space_lists(["--output-len=16", "256", "--url", "u"]) == ["--output-len", "16,256", "--url", "u"]
    assert join_space_lists(["--run-name", "1", "--batch-size", "8"]) == ["--run-name", "1", "--batch-size", "8"]


def test_pasted_sglang_command_runs_and_sends_its_options(fake, tmp_path):
    lines = tmp_path / "result.jsonl"
    r = invoke("--model", "None", "--base-url", fake.url, "--batch-size", "1", "2", "--input-len", "16", "32",
               "--output-len", "3", "--run-name", "pasted", "--result-filename", lines, "--skip-warmup",
               "--seed", "42", "--temperature", "0", "--return-logprob", "--client-stream-interval", "2",
               "--cache-hit-rate", "0.5", "--input-len-step-percentage", "0.1", "--show-report",
               "--out", tmp_path / "r", env={"GITHUB_STEP_SUMMARY": ""})
    assert r.exit_code == 0, r.output
    cases = [(x.batch_size, x.input_len, x.output_len) for x in map(BenchOneCaseResult.parse,
                                                                     lines.read_text().splitlines())]
    assert cases == [(1, 16, 3), (1, 32, 3), (2, 16, 3), (2, 32, 3)]  # SGLang's itertools.product order
    gens = fake.seen("/generate")
    warm, timed = gens[0::2], gens[1::2]  # --cache-hit-rate: a prefix request before each timed batch
    assert [len(w.body["input_ids"][0]) for w in warm] == [8, 16, 8, 16]  # int(input_len * 0.5)
    assert all(w.body["sampling_params"]["max_new_tokens"] == 1 for w in warm)
    for w, t in zip(warm, timed):
        assert all(t_ids[:len(w_ids)] == w_ids for w_ids, t_ids in zip(w.body["input_ids"], t.body["input_ids"]))
        assert t.body["return_logprob"] is True and t.body["sampling_params"]["stream_interval"] == 2
    assert "input-len-step-percentage: recorded" in r.output
    assert re.search(r"^\|\s+batch size\s+\|\s+input len\s+\|\s+latency \(s\)", r.output, re.M)  # --show-report
    assert "Input lens: [16, 32]. Output lens: [3]. Cache hit rate: 50.0%." in r.output


def test_range_syntax_and_repeats_dropped(fake, tmp_path):
    r = invoke("--url", fake.url, "--batch-size", "1..4*2", "4", "--input-len", "8", "--output-len", "2",
               "--skip-warmup", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    (run_dir,) = (tmp_path / "r").iterdir()
    assert load_run(run_dir).rows["batch_size"].tolist() == [1, 2, 4]


def test_results_table_is_log_width_without_a_terminal(fake, tmp_path, monkeypatch):
    # as every other command's (cli/console.make_console): not rich's 80 columns, which wrapped each value
    monkeypatch.delenv("COLUMNS", raising=False)
    r = invoke("--url", fake.url, "--batch-size", "1", "--input-len", "8", "--output-len", "2", "--skip-warmup",
               "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    row = next(ln for ln in r.output.splitlines() if ln.startswith("│ bs1-in8-out2 │ ok"))
    assert len(row) > 80 and row.rstrip().endswith("│"), r.output  # the whole row on one line


def test_name_is_a_hidden_alias_of_run_name(fake, tmp_path):
    r = invoke("--url", fake.url, "--name", "old", "--input-len", "8", "--output-len", "2", "--skip-warmup",
               "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    (run_dir,) = (tmp_path / "r").iterdir()
    assert run_dir.name.startswith("server-bench-old-")
    assert "--name" not in invoke("--help").output
    r = invoke("--url", fake.url, "--name", "a", "--run-name", "b", "--out", tmp_path / "r2")
    assert r.exit_code == 2 and r.output.startswith("error: --run-name 'b' and --name 'a'")


def test_sglang_report_appended_to_github_step_summary(fake, tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    r = invoke("--url", fake.url, "--batch-size", "1", "2", "--input-len", "8", "--output-len", "2",
               "--skip-warmup", "--out", tmp_path / "r", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 0, r.output
    text = summary.read_text()
    assert text.startswith("earlier step\n\nInput lens: [8]. Output lens: [2].\n")
    header, rule, *rows = text.splitlines()[3:]
    assert [h.strip() for h in header.strip("|").split("|")] == [
        "batch size", "input len", "latency (s)", "input throughput (tok/s)", "output throughput (tok/s)",
        "acc length", "ITL (ms)", "input cost ($/1M)", "output cost ($/1M)", "cache hit rate"]
    assert [int(x.split("|")[1]) for x in rows] == [1, 2]
    assert [x.split("|")[6].strip() for x in rows] == ["2.5", "2.5"]  # the fake's avg_spec_accept_length
    r = invoke("--url", fake.url, "--input-len", "8", "--output-len", "2", "--skip-warmup",
               "--no-append-to-github-summary", "--out", tmp_path / "r", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 0 and summary.read_text() == text


def test_repeat_keeps_every_batch_and_the_median(fake, tmp_path):
    res = run_server_bench(ServerBenchConfig(url=fake.url, backend="sglang", batch_sizes=(2,), input_lens=(8,),
                                             output_lens=(2,), skip_warmup=True, repeat=3,
                                             out_dir=tmp_path / "r"), sleep=lambda s: None)
    (row,) = res.rows
    assert row.status == "ok" and row.repeats == 3
    assert len(fake.seen("/generate")) == 3 and len(fake.seen("/flush_cache")) == 3  # a flush before each
    assert len(row.latency_samples) == 3 and row.latency == sorted(row.latency_samples)[1]
    assert row.output_throughput == sorted(row.output_throughput_samples)[1]
    ids = [g.body["input_ids"] for g in fake.seen("/generate")]
    assert ids[0] == ids[1] == ids[2]  # the same prompts each time: the batches are comparable
    stored = load_run(res.run_dir).rows
    assert list(stored["last_ttft_samples"][0]) == row.last_ttft_samples


def test_prompt_patterns():
    import random

    rep = parse_prompt_pattern("repeat:5")
    (a, b) = rep.ids(random.Random(1), 2, 23, 1000)
    assert len(a) == 23 and a[:5] * 4 + a[:3] == a and a[:5] != b[:5]
    assert str(rep) == "repeat:5" and str(parse_prompt_pattern("random")) == "random"
    from kbench.errors import BadInput
    for bad in ("repeat:0", "repeat", "zipf"):
        with pytest.raises(BadInput, match="--prompt-pattern"):
            parse_prompt_pattern(bad)


def test_counters_from_prometheus_text():
    before = parse_counters('# HELP x\nsglang:cached_tokens_total{model_name="m",le="a b}"} 10\n'
                            'sglang:prompt_tokens_total{model_name="m"} 100\nsglang:prompt_tokens_total{model_name="n"} 5\n')
    after = parse_counters('sglang:cached_tokens_total{model_name="m",le="a b}"} 40\n'
                           'sglang:prompt_tokens_total{model_name="m"} 200\nsglang:prompt_tokens_total{model_name="n"} 5\n')
    assert before["sglang:prompt_tokens_total"] == 105.0
    assert case_counters("sglang", before, after).cache_hit_rate == pytest.approx(0.3)
    assert case_counters("sglang", None, after).cache_hit_rate is None
    v0 = parse_counters("vllm:spec_decode_num_drafts_total{engine=\"0\"} 4\nvllm:spec_decode_num_draft_tokens_total 12\n"
                        "vllm:spec_decode_num_accepted_tokens_total 6\n")
    v1 = parse_counters("vllm:spec_decode_num_drafts_total{engine=\"0\"} 30\nvllm:spec_decode_num_draft_tokens_total 90\n"
                        "vllm:spec_decode_num_accepted_tokens_total 78\n")
    c = case_counters("vllm", v0, v1)
    assert c.acc_length == pytest.approx(1 + 72 / 26) and c.acceptance_rate == pytest.approx(72 / 78)
