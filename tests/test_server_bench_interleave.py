"""The interleaved A/B (kbench.server.interleave) against two SGLang-protocol test servers: the ABBA order seen by
the servers, two run folders whose samples pair round by round, the switch command of one server, a failed batch,
and the bad inputs (one line, exit 2). The real vLLM A/B is in test_server_bench_vllm.py."""
from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from fake_sglang import FakeSGLang, Faults  # noqa: E402

from kbench.runs.store import load_run  # noqa: E402
from kbench.server import ServerBenchConfig  # noqa: E402
from kbench.server.interleave import run_interleaved, schedule  # noqa: E402


@pytest.fixture
def two(model_dir):
    a = FakeSGLang(Faults(model_path=str(model_dir))).start()
    b = FakeSGLang(Faults(model_path=str(model_dir))).start()
    yield a, b
    a.stop()
    b.stop()


def cfg(a, b, tmp_path, **kw) -> ServerBenchConfig:
    base = dict(url=a.url, url_b=b.url if b else None, backend="sglang", batch_sizes=(1, 2), input_lens=(16,),
                output_lens=(4,), skip_warmup=True, repeat=4, run_name="ab", out_dir=tmp_path / "results",
                request_timeout=10, alpha=0.1)  # alpha 0.1: 4 rounds can reach it (the order is what is tested)
    base.update(kw)
    return ServerBenchConfig(**base)


def cli(*args):
    from kbench.cli.main import cli as group

    return CliRunner().invoke(group, ["server-bench", *map(str, args)], env={"COLUMNS": "200"})


def test_the_schedule_is_abba_per_case_and_one_switch_per_round_for_one_server():
    two_servers = schedule(2, 4, "two-servers")
    case0 = "".join(s for _, c, s in two_servers if c == 0)
    case1 = "".join(s for _, c, s in two_servers if c == 1)
    assert case0 == "abbaabba" and case1 == "baabbaab"
    one = "".join(s for _, _, s in schedule(2, 4, "switch"))
    assert one == "aabbbbaaaabbbbaa"  # A's cases then B's, then B's then A's: a switch per round


def test_servers_see_the_batches_in_abba_order_and_the_runs_pair_round_by_round(two, tmp_path):
    a, b = two
    ab = run_interleaved(cfg(a, b, tmp_path))
    assert ab.exit_code == 0 and ab.mode == "two-servers"
    seen = sorted([(r.t, "a", len(r.body["input_ids"])) for r in a.seen("/generate")]
                  + [(r.t, "b", len(r.body["input_ids"])) for r in b.seen("/generate")])
    order = {bs: "".join(side for _, side, n in seen if n == bs) for bs in (1, 2)}
    assert order == {1: "abbaabba", 2: "baabbaab"}, seen
    ma, mb = (json.loads((r.run_dir / "manifest.json").read_text()) for r in (ab.a, ab.b))
    assert ma["interleave"]["id"] == mb["interleave"]["id"]
    assert (ma["interleave"]["side"], mb["interleave"]["side"]) == ("a", "b")
    assert ma["interleave"]["other"] == ab.b.run_dir.name and mb["interleave"]["other"] == ab.a.run_dir.name
    assert ma["interleave"]["rounds"] == 4 and ma["interleave"]["order"] == "ABBA"
    assert ab.a.run_dir.name.startswith("server-bench-ab-a-") and ab.b.run_dir.name.startswith("server-bench-ab-b-")
    rows_a, rows_b = load_run(ab.a.run_dir).rows, load_run(ab.b.run_dir).rows
    assert list(rows_a["case_id"]) == list(rows_b["case_id"]) == ["bs1-in16-out4", "bs2-in16-out4"]
    assert all(len(x) == 4 for x in rows_a["latency_samples"]) and all(len(x) == 4 for x in rows_b["latency_samples"])
    # the same prompts on both sides
    assert [r.body["input_ids"] for r in a.seen("/generate")][:1] == [r.body["input_ids"] for r in b.seen("/generate")][:1]


def test_the_cli_prints_the_rounds_and_the_gate_command_and_the_gate_pairs_them(two, tmp_path):
    a, b = two
    res = cli("--url", a.url, "--url-b", b.url, "--backend", "sglang", "--batch-size", "1", "--input-len", "16",
              "--output-len", "4", "--skip-warmup", "--repeat", "7", "--run-name", "ab", "--out", tmp_path / "r")
    assert res.exit_code == 0, res.output
    assert "round 7/7 bs1-in16-out4:" in res.output
    assert "judge it (PASS, FAIL or INCONCLUSIVE) with: kbench gate --baseline" in res.output
    assert "the verdict: kbench gate" not in res.output  # a command is not a verdict (#54)
    ra, rb = sorted((tmp_path / "r").glob("server-bench-ab-*"))
    from gate_synth import gate_cli

    g = gate_cli("--baseline", ra, "--candidate", rb)
    assert g.exit_code in (0, 1, 3), g.output
    out = " ".join(g.output.split())
    assert "noise: paired, the 7 ABBA rounds of one interleaved run" in out
    first = g.output.splitlines()[0]
    assert first.split(":")[0] == {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[g.exit_code] and len(first) <= 120
    assert g.output.strip().splitlines()[-1] == first


def test_a_slower_b_fails_the_paired_gate(two, tmp_path):
    a, b = two
    b.faults.first_token_delay = 0.3  # B's prefill 300 ms slower: far beyond the noise of a busy 2-core machine
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=8))
    from kbench.gate import run_gate

    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    assert not res.passed and res.exit_code == 1
    assert res.summary_line().startswith("FAIL: ") and len(res.summary_line()) <= 120
    assert res.details().startswith("B is slower in the decode-heavy case (bs1-in16-out4: latency +")
    lat = next(r for r in res.rows if r.metric == "latency")
    assert lat.method == "wilcoxon" and lat.p_value == pytest.approx(1 / 256)


def test_one_server_switched_by_a_command_between_phases(model_dir, tmp_path):
    with FakeSGLang(Faults(model_path=str(model_dir))) as srv:
        log = tmp_path / "switches.log"
        # run without a shell: shell syntax goes through bash -c, {side} replaced in each word
        cmd = f"bash -c 'echo {{side}} $KBENCH_AB_SIDE >> {log}'"
        ab = run_interleaved(cfg(srv, None, tmp_path, switch_command=cmd, repeat=4))
        assert ab.mode == "switch" and ab.switches == 5
        # before A's first phase, then A B | B A | A B | B A: a switch per round
        assert log.read_text().splitlines() == ["a a", "b b", "a a", "b b", "a a"]
        assert len(load_run(ab.b.run_dir).rows["latency_samples"][0]) == 4


def test_a_failing_switch_command_is_one_line(model_dir, tmp_path):
    with FakeSGLang(Faults(model_path=str(model_dir))) as srv:
        res = cli("--url", srv.url, "--switch-command", "bash -c 'exit 3'", "--backend", "sglang", "--skip-warmup",
                  "--repeat", "7", "--out", tmp_path / "r")
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-1] == "error: --switch-command for side A exited 3: bash -c 'exit 3'"


def test_the_switch_command_runs_without_a_shell(model_dir, tmp_path):
    """Its words are split as a shell line and run as they are: `;` and `$(...)` in it are words, never code."""
    with FakeSGLang(Faults(model_path=str(model_dir))) as srv:
        res = cli("--url", srv.url, "--switch-command", f"true; touch {tmp_path}/PWNED", "--backend", "sglang",
                  "--skip-warmup", "--repeat", "7", "--out", tmp_path / "r")
        assert res.exit_code == 1 and "--switch-command for side A cannot run 'true;'" in res.output
        res = cli("--url", srv.url, "--switch-command", "bash 'unclosed", "--backend", "sglang", "--out", tmp_path / "r")
        assert res.exit_code == 2 and "--switch-command \"bash 'unclosed\": No closing quotation" in res.output
    assert not (tmp_path / "PWNED").exists()


def test_a_and_b_serving_different_models_is_bad_input(tmp_path):
    with FakeSGLang(Faults(model_path="org/model-a")) as a, FakeSGLang(Faults(model_path="org/model-b")) as b:
        res = cli("--url", a.url, "--url-b", b.url, "--backend", "sglang", "--vocab-size", "512", "--skip-warmup",
                  "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == ["error: A and B serve different models ('org/model-a' vs "
                                               "'org/model-b'): an A/B compares one model with one setting changed; "
                                               "give both sides the same --model"]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize("args,msg", [
    (["--url-b", "http://127.0.0.1:1", "--switch-command", "true"], "--url-b and --switch-command: give one"),
    (["--url-b", "ftp://x"], "--url 'ftp://x': expected http://HOST:PORT or https://HOST:PORT"),
    (["--url-b", "http://u:secret@127.0.0.1:1"], "--url-b: a password in B's URL is not supported"),
    (["--switch-command", "true", "--switch-timeout", "0"], "--switch-timeout 0.0: must be a number of seconds > 0"),
])
def test_bad_interleave_options_are_one_line(tmp_path, args, msg):
    res = cli("--url", "http://127.0.0.1:9", *args, "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], res.output
    assert "secret" not in res.output


def test_a_failed_batch_fails_the_case_on_both_sides(two, tmp_path):
    a, b = two
    b.faults.stream_plan = ["ok", "truncate"]  # B's second batch (round 0 of bs2, which B starts) ends early
    ab = run_interleaved(cfg(a, b, tmp_path))
    assert ab.exit_code == 1
    ra = {r.case_id: r for r in ab.a.rows}
    rb = {r.case_id: r for r in ab.b.rows}
    assert rb["bs2-in16-out4"].status == "failed" and ra["bs2-in16-out4"].status == "failed"
    assert ra["bs2-in16-out4"].reason.startswith("the paired batch on B failed:")
    assert ra["bs1-in16-out4"].status == rb["bs1-in16-out4"].status == "ok"
    assert len(b.seen("/generate")) == 2 + 3  # bs2's remaining rounds were not sent
    from kbench.gate import run_gate

    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    assert not res.passed and res.details().startswith(
        "B fails in 1 of the 2 decode-heavy cases (bs2-in16-out4: failed)")


def test_an_interleaved_half_is_not_resumed(two, tmp_path):
    a, b = two
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=2, alpha=0.3))
    res = cli("--resume", ab.b.run_dir, "--url", b.url)
    assert res.exit_code == 2
    assert "one side of an interleaved A/B, which is not resumed" in res.output


def test_repeat_auto_stops_once_every_case_is_decided_and_the_gate_agrees(two, tmp_path):
    """--repeat auto (kbench.gate.sequential): B 300 ms slower, at most 16 rounds (--repeat 16: the plan's N, the
    budget fitting more). O'Brien-Fleming spending over the plan looks at 8, 10 and 16 rounds; the first two
    test at 2.7e-4 and 8.5e-4, which 8 and 10 rounds of an exact signed-rank test cannot reach (1/256, 1/1024),
    and the last at 0.0089 decides FAIL; the manifests record the plan, the looks and the alpha of the last one,
    and the gate, testing at that alpha, gives the same answer."""
    a, b = two
    b.faults.first_token_delay = 0.3
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), alpha=0.01, repeat=16, repeat_auto=True,
                             budget=120, batches_per_round=2))
    m = json.loads((ab.a.run_dir / "manifest.json").read_text())["interleave"]
    assert m["stopped"] == "decided" and m["looks"] == 3 and m["rounds_run"] == 16 == ab.rounds
    assert m["planned_rounds"] == 16 and m["alpha_spent"] == pytest.approx(0.01 - 0.0011212334, rel=1e-4)
    assert m["decided"] == {"bs1-in16-out4": "fail"} and m["batches_per_round"] == 2
    assert len(a.seen("/generate")) == len(b.seen("/generate")) == 32  # 16 rounds x 2 batches a side
    from kbench.gate import run_gate

    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    assert res.verdict == "FAIL" and res.alpha == pytest.approx(m["alpha_spent"])
    assert any("looked at its rounds 3 times" in w for w in res.warnings)


def test_repeat_auto_ends_at_the_budget_undecided_and_the_gate_says_inconclusive(two, tmp_path):
    a, b = two
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), alpha=0.01, repeat=400, repeat_auto=True,
                             budget=3))
    m = json.loads((ab.a.run_dir / "manifest.json").read_text())["interleave"]
    assert m["stopped"] in ("budget", "decided", "planned-rounds", "out-of-reach")  # planned: what 3 s fit
    from kbench.gate import run_gate

    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    assert res.verdict in ("PASS", "INCONCLUSIVE")  # an A/A: never FAIL
    if m["stopped"] != "decided":
        assert res.verdict == "INCONCLUSIVE" or m["decided"]


def test_repeat_auto_stops_a_case_out_of_the_plans_reach_and_the_gate_says_inconclusive(two, tmp_path,
                                                                                         monkeypatch):
    """#54 out of reach: a case the rule calls out of the plan's reach (kbench.gate.sequential._out_of_reach, here
    made to say so at every look; the rule itself is checked on the simulated pairs of tests/test_gate_verdicts.py)
    stops being measured at that look: the run ends there, not at the plan's end, records the case and its
    rounds, and the gate, testing it at that look's alpha, says INCONCLUSIVE with the rounds that would decide it."""
    from kbench.gate import run_gate, sequential

    seen = []
    monkeypatch.setattr(sequential, "_out_of_reach", lambda *a: seen.append(a[-1]) or True)
    a, b = two
    a.faults.first_token_jitter = b.faults.first_token_jitter = 0.03  # A/A through noise: nothing decides early
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), alpha=0.01, repeat=40, repeat_auto=True,
                             budget=600))
    m = json.loads((ab.a.run_dir / "manifest.json").read_text())["interleave"]
    assert m["planned_rounds"] == 40 and seen and set(seen) == {40}
    # looks at 8, 10, 13, 17: the first three test at alphas 16 rounds of a signed-rank test cannot reach
    assert m["stopped"] == "out-of-reach" and m["rounds_run"] == 17 == ab.rounds and m["looks"] == 4
    assert m["out_of_reach"] == {"bs1-in16-out4": 17} and m["decided"] == {}
    assert len(a.seen("/generate")) == len(b.seen("/generate")) == 17  # nothing measured after it
    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    assert res.verdict == "INCONCLUSIVE" and res.passed is False
    assert any(r.outcome == "inconclusive" and r.rounds_needed for r in res.rows)


def _prefills_since_flush(server) -> tuple[int, int, list]:
    """(flushes, batches, repeats) in the order one fake server got them: a repeat is a batch whose prompts the
    server had prefilled since its last /flush_cache (a prefix-cache hit on a real server)."""
    flushes, batches, repeats, seen = 0, 0, [], set()
    for r in server.requests:
        if r.path == "/flush_cache":
            flushes, seen = flushes + 1, set()
        elif r.path == "/generate":
            batches += 1
            key = json.dumps(r.body["input_ids"])
            if key in seen:
                repeats.append(batches)
            seen.add(key)
    return flushes, batches, repeats


@pytest.mark.parametrize("distinct", [True, False])
def test_k_batches_a_round_flush_only_before_prompts_the_server_has_seen(two, tmp_path, distinct):
    """#54, fewer flushes (a flush took about 49 ms on the 2-core CPU machine, 12 a round a quarter of its
    wall): with --batches-per-round 3 a side's 3 batches of a case in a round have their own prompts (the same
    on both sides), and a server is flushed only before prompts it has prefilled since its last flush. Two
    server processes (told apart by /metrics' process_start_time_seconds): one flush a side and round, before
    the first of its 6 batches of 2 cases (before: 6), so the first case's row says 1 flush and the second's 0.
    Not told apart (no /metrics): tracked as one server, so B's batch after A's same prompts is flushed too (13
    of the 24 batches of 4 rounds on each, by this order). Either way no batch repeats prompts its server has
    prefilled since its last flush, and each round's prompts are the same on both sides."""
    a, b = two
    if distinct:
        a.faults.metrics_start_time, b.faults.metrics_start_time = 1.0, 2.0
    ab = run_interleaved(cfg(a, b, tmp_path, repeat=4, batches_per_round=3))
    assert ab.exit_code == 0 and all(r.status == "ok" for r in ab.a.rows + ab.b.rows)
    for srv in (a, b):
        flushes, batches, repeats = _prefills_since_flush(srv)
        assert batches == 4 * 2 * 3 and repeats == [], (batches, repeats)
        assert flushes == 4 if distinct else 4 < flushes < batches, flushes
    prompts = {s: sorted(json.dumps(r.body["input_ids"]) for r in srv.seen("/generate")) for s, srv in
               (("a", a), ("b", b))}
    assert prompts["a"] == prompts["b"] and len(set(prompts["a"])) == 2 * 3  # 3 sets a case, both sides
    if distinct:  # a row's flushes: those before its batches in its last round
        assert [(r.case_id, r.flush_attempts) for r in ab.a.rows] == [("bs1-in16-out4", 1), ("bs2-in16-out4", 0)]


@pytest.mark.parametrize("distinct", [True, False])
def test_the_gate_says_when_a_and_b_are_two_processes_on_one_host(two, tmp_path, distinct):
    """#54: two vLLM CPU processes on one 2-core machine differ pair to pair by up to 28% with nothing changed
    (docs/gate.md), so a gate of two processes on one host says so below its verdict; one server behind both URLs
    (or processes /metrics cannot tell apart) does not get the line."""
    from kbench.gate import run_gate

    a, b = two
    if distinct:
        a.faults.metrics_start_time, b.faults.metrics_start_time = 1.0, 2.0
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=7))
    m = json.loads((ab.a.run_dir / "manifest.json").read_text())["interleave"]
    assert m["two_processes_one_host"] is distinct
    said = [w for w in run_gate(ab.a.run_dir, ab.b.run_dir).warnings if "two server processes on one host" in w]
    assert len(said) == (1 if distinct else 0), said


def test_one_host_is_the_same_host_or_both_loopback():
    from kbench.server.interleave import _one_host

    assert _one_host("http://127.0.0.1:1", "http://localhost:2")
    assert _one_host("http://10.0.0.5:1", "http://10.0.0.5:2")
    assert not _one_host("http://10.0.0.5:1", "http://10.0.0.6:1")
    assert not _one_host("http://127.0.0.1:1", None)


def test_a_hung_resolver_does_not_hold_the_runs_end(monkeypatch):
    """_one_host runs once both URLs have answered, at the run's end: a resolver that hangs costs at most its
    timeout, and two names it could not resolve count as one host only when they are the same name."""
    import socket
    import time

    from kbench.server.interleave import _one_host

    monkeypatch.setattr(socket, "gethostbyname", lambda host: time.sleep(30) or "10.0.0.1")
    t0 = time.monotonic()
    assert _one_host("http://gpu-a:1", "http://gpu-a:2")
    assert not _one_host("http://gpu-a:1", "http://gpu-b:2")
    assert time.monotonic() - t0 < 10


def test_one_batch_a_round_is_flushed_as_before(two, tmp_path):
    a, b = two
    a.faults.metrics_start_time, b.faults.metrics_start_time = 1.0, 2.0
    run_interleaved(cfg(a, b, tmp_path, repeat=4))
    assert len(a.seen("/flush_cache")) == len(a.seen("/generate")) == 4 * 2


def test_the_budget_is_the_runs_wall_clock_warm_up_included(two, tmp_path, monkeypatch):
    """--budget is wall-clock seconds of the whole run: a warm-up of 1.5 s (made slow here) spends it too, so a
    budget of 5 s leaves about 3.5 s of rounds and the run ends within about 5 s, not 1.5 + 5 (before, the
    budget counted only the rounds); the manifest records the seconds before the rounds. An A/A through noise
    that the out-of-reach stop is told not to end early: only the budget ends it."""
    import time

    from kbench.gate import sequential
    from kbench.server import interleave

    monkeypatch.setattr(interleave, "_warm", lambda *a: time.sleep(1.5))
    monkeypatch.setattr(sequential, "_out_of_reach", lambda *a: False)
    a, b = two
    a.faults.first_token_jitter = b.faults.first_token_jitter = 0.03
    t0 = time.monotonic()
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), alpha=0.01, repeat=4000, repeat_auto=True,
                             budget=5))
    wall = time.monotonic() - t0
    m = json.loads((ab.a.run_dir / "manifest.json").read_text())["interleave"]
    assert m["before_rounds_s"] >= 1.5 and m["stopped"] in ("budget", "planned-rounds"), m
    assert wall < 5 + 0.9, (wall, m)
    # a warm-up that spends the whole budget leaves no rounds for the first look: bad input, saying so
    monkeypatch.setattr(interleave, "_warm", lambda *a: time.sleep(1.0))
    res = cli("--url", a.url, "--url-b", b.url, "--backend", "sglang", "--batch-size", "1", "--input-len", "16",
              "--output-len", "4", "--repeat", "auto", "--budget", "0.9", "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --budget 0.9 s cannot reach the 8 rounds the first look needs") and \
        "of connecting and warm-up" in last, last


def test_a_budget_that_cannot_reach_the_first_look_is_bad_input(two, tmp_path):
    a, b = two
    a.faults.first_token_delay = 0.2
    res = cli("--url", a.url, "--url-b", b.url, "--backend", "sglang", "--batch-size", "1", "--input-len", "16",
              "--output-len", "4", "--skip-warmup", "--repeat", "auto", "--budget", "0.5", "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --budget 0.5 s cannot reach the 8 rounds the first look needs: a round took")


def test_too_few_rounds_for_an_interleaved_ab_is_bad_input(tmp_path):
    res = cli("--url", "http://127.0.0.1:9", "--url-b", "http://127.0.0.1:9", "--repeat", "4", "--out", tmp_path / "r")
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["error: --repeat 4: an interleaved A/B needs at least 7 rounds (with "
                                               "fewer the gate's paired test cannot reach alpha 0.01: it could never "
                                               "find a difference); give --repeat 7 or more, or --repeat auto"]


def test_an_unreachable_url_b_is_named_as_b(model_dir, tmp_path):
    """#54.7: an unreachable --url-b was reported without saying it was B."""
    with FakeSGLang(Faults(model_path=str(model_dir))) as a:
        res = cli("--url", a.url, "--url-b", "http://127.0.0.1:9", "--backend", "sglang", "--skip-warmup",
                  "--repeat", "7", "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: B (--url-b http://127.0.0.1:9) does not answer: ")


def test_each_finished_round_is_in_both_journals_as_it_is_measured(two, tmp_path):
    """#55.2: after every round of a case both halves' journals hold its row with every finished round (the last
    row of a case counts), so a kill keeps them."""
    a, b = two
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=7, alpha=0.01))
    for side in (ab.a, ab.b):
        lines = [json.loads(x) for x in (side.run_dir / "rows.jsonl").read_text().splitlines()]
        assert [len(x["latency_samples"]) for x in lines] == [1, 2, 3, 4, 5, 6, 7]
        assert lines[-1]["sample_rounds"] == [0, 1, 2, 3, 4, 5, 6]
        assert len(load_run(side.run_dir).rows) == 1  # one row per case when read


def test_a_round_of_k_batches_counts_the_server_counters_of_all_k():
    """#54: with --batches-per-round K > 1 a round's latency is the median of its K batches, but its draft and cache
    counters were the last batch's alone (1 of K batches' drafts: an acceptance rate and a cache-hit rate of a third
    of the round); they are summed over the K batches."""
    from kbench.server.counters import CaseCounters
    from kbench.server.interleave import _round_value

    def batch(lat, drafts, tokens, accepted, cached, prompt):
        return {"m": {"latency": lat, "last_ttft": lat / 4}, "gen": -1.0, "acc": -1.0,
                "counters": CaseCounters(cached_tokens=cached, prompt_tokens=prompt, spec_drafts=drafts,
                                         spec_draft_tokens=tokens, spec_accepted_tokens=accepted)}

    r = _round_value([batch(0.10, 4, 12, 9, 0, 64), batch(0.30, 5, 15, 6, 32, 64), batch(0.12, 3, 9, 3, 64, 64)])
    c = r["counters"]
    assert (c.spec_drafts, c.spec_draft_tokens, c.spec_accepted_tokens) == (12, 36, 18)
    assert (c.cached_tokens, c.prompt_tokens) == (96, 192) and c.cache_hit_rate == pytest.approx(0.5)
    assert r["m"]["latency"] == pytest.approx(0.12)  # the median of the three: one slow batch decides nothing
    none = _round_value([batch(0.1, None, None, None, None, None), batch(0.2, None, None, None, None, None)])
    assert none["counters"].spec_drafts is None  # a server that counts nothing: nothing, not 0


def test_two_server_processes_are_read_for_counters_once_a_side_and_round(two, tmp_path):
    """#54: a round's wall was half flushes and /metrics reads (vLLM took ~50 ms a read on a busy 2-core machine,
    two reads a batch: a third of the round). With K batches per round on two server processes (different
    process_start_time_seconds), each side's counters are read before its first batch of the case and after its
    last: 2 reads a side and round instead of 2 K, and the counters still cover all K batches (the cache-hit rate
    of every prompt token). One server behind both URLs (the same start time) is read around each batch as
    before, where nothing else runs on it."""
    a, b = two
    a.faults.metrics_start_time, b.faults.metrics_start_time = 1000.0, 2000.0
    ab = run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=8, batches_per_round=3))
    assert ab.exit_code == 0
    assert len(a.seen("/metrics")) == len(b.seen("/metrics")) == 1 + 2 * 8  # who is who, then 2 a round
    for side in (ab.a, ab.b):
        row = load_run(side.run_dir).rows.to_dict("records")[0]
        assert row["cache_hit_rate"] == pytest.approx(0.25)  # the fake caches a quarter of every prompt token
    b.faults.metrics_start_time = 1000.0  # the same process, as far as its /metrics says
    a.requests.clear(), b.requests.clear()
    run_interleaved(cfg(a, b, tmp_path, batch_sizes=(1,), repeat=8, batches_per_round=3, run_name="same"))
    assert len(a.seen("/metrics")) == 1 + 2 * 3 * 8
