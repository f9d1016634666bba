"""Parity by construction (issue 52): kbench's resolution is the engine release's rules file
(kbench/recommend/rules/sglang-0.5.23.toml) read by one resolver; this test generates the launch lines
(tests/resolve_lines.py: every flag the rules model, with its values, on seven model folders, SM90 and SM100, five
algorithms, TP/DP, fp8 KV, eager), runs SGLang 0.5.23's own ServerArgs.resolve_once over all of them in one
subprocess (tests/servers/sglang_resolve.py) and requires
- on every line SGLang starts: kbench resolves it, each field equal to SGLang's;
- on every line SGLang refuses: kbench refuses it too, quoting SGLang's reason.
The counts (lines, fields, equal, refusals matched) are printed and written to $KBENCH_PARITY_TABLE if set.

vLLM 0.34.0 resolves its backend and block size only on a CUDA platform: its rules are checked rule by rule
against the cited source (test_every_vllm_rule_is_cited_in_the_released_source, where the sdist is at hand) and on
the lines below whose answer each rule's cite decides; the fields a CPU build of vLLM parses are checked against
vLLM's own parser in tests/test_recommend_resolve.py::test_vllm_reads_the_given_fields_as_kbench_does.

Adding SGLang 0.5.24: a new rules file, the venv's pin moved to 0.5.24, and this test run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from resolve_lines import CONFIGS, argv, lines, write_folders  # noqa: E402
from test_recommend_resolve import sglang_resolve  # noqa: E402,F401  (the fixture: SGLang's own resolution venv)

from kbench.errors import BadInput  # noqa: E402
from kbench.recommend.resolve import resolve_line  # noqa: E402
from kbench.recommend.rules import Refused, load_rules  # noqa: E402

SERVERS = Path(__file__).parent / "servers"
# the fields compared: SGLang's own names (ServerArgs, as resolved_view publishes them)
COMPARED = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
            "speculative_draft_attention_backend", "speculative_attention_mode", "page_size", "speculative_algorithm",
            "speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens", "max_running_requests",
            "disable_overlap_schedule", "tp_size", "dp_size", "attn_dp_size", "kv_cache_dtype", "disable_cuda_graph")
LINES = lines()


def test_the_generated_lines_cover_what_the_issue_asks_for():
    assert len(LINES) >= 500
    flat = [" ".join(f) for _, _, f in LINES]
    assert {m for _, m, _ in LINES} == set(CONFIGS) and {g for g, _, _ in LINES} == {"sm90", "sm100"}
    for algo in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"):
        assert any(f"--speculative-algorithm {algo}" in f for f in flat), algo
    for needle in ("--tp-size 8", "--enable-dp-attention --dp-size 8", "--kv-cache-dtype fp8_e4m3",
                   "--kv-cache-dtype fp8_e5m2", "--disable-cuda-graph", "--page-size 64", "--speculative-eagle-topk 4",
                   "--prefill-attention-backend", "--speculative-draft-attention-backend",
                   "--speculative-attention-mode decode", "--cuda-graph-max-bs", "--dtype bf16"):
        assert any(needle in f for f in flat), needle
    # every value of every flag the rules model appears on some line
    rs = load_rules("sglang")
    for flag in ("--attention-backend", "--kv-cache-dtype"):
        for value in rs.flags[flag]["models"]:
            assert any(f"{flag} {value}" in f for f in flat), (flag, value)


def _engine(py: Path, cases: list[dict], cwd: Path) -> list[dict]:
    r = subprocess.run([str(py), str(SERVERS / "sglang_resolve.py")], input=json.dumps(cases), capture_output=True,
                       text=True, cwd=cwd, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["version"] == "0.5.23"
    return got["results"]


def _kbench(gpu: str, args: list[str]):
    try:
        r = resolve_line("python -m sglang.launch_server " + " ".join(args), gpu)
    except BadInput as e:
        return e
    f = dict(r.fields)
    # what pricing reads off Resolved is the same resolution
    assert (r.tp_size, r.dp_attention, r.kv_cache_dtype, r.cuda_graph) == (
        f["tp_size"], f["attn_dp_size"], f["kv_cache_dtype"], not f["disable_cuda_graph"])
    return f


def _engine_says(error: str) -> str:
    return re.sub(r"^(\w+Error|SystemExit): ", "", error).strip()


def test_kbench_resolves_every_generated_line_as_sglang_does(sglang_resolve, tmp_path):  # noqa: F811
    folders = write_folders(tmp_path)
    cases = [{"argv": argv(m, f, folders), "gpu": g} for g, m, f in LINES]
    t0 = time.perf_counter()
    engine = _engine(sglang_resolve, cases, tmp_path)
    t_engine = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = [_kbench(c["gpu"], c["argv"]) for c in cases]
    t_kbench = time.perf_counter() - t0
    counts = dict(lines=len(cases), started=0, fields=0, equal=0, refused_by_sglang=0, refusals_matched=0,
                  refused_by_kbench_only=0)
    wrong = []
    for c, e, k in zip(cases, engine, ours):
        where = f"{c['gpu']} {' '.join(c['argv'][1:])}"
        if "error" in e:
            counts["refused_by_sglang"] += 1
            says = _engine_says(e["error"])
            bare_assert = e["error"].strip() == "AssertionError:"  # an assert without a message: kbench quotes it
            if bare_assert and isinstance(k, Refused) and k.says.startswith("assert "):
                counts["refusals_matched"] += 1
                continue
            if not isinstance(k, BadInput):
                wrong.append(f"SGLang refuses ({says[:120]}), kbench resolves: {where}")
            elif not isinstance(k, Refused) or not says or (k.says not in says and says not in k.says):
                wrong.append(f"SGLang refuses ({says[:120]}), kbench for another reason ({k}): {where}")
            elif "\n" in str(k) or k.says not in str(k):
                wrong.append(f"kbench's refusal is not one line quoting the engine: {k!r}")
            else:
                counts["refusals_matched"] += 1
            continue
        counts["started"] += 1
        if isinstance(k, BadInput):
            counts["refused_by_kbench_only"] += 1
            wrong.append(f"SGLang starts it, kbench refuses ({k}): {where}")
            continue
        for f in COMPARED:
            counts["fields"] += 1
            if k.get(f) != e[f]:
                wrong.append(f"{f}: kbench {k.get(f)!r}, SGLang {e[f]!r}: {where}")
            else:
                counts["equal"] += 1
    counts.update(compared_fields=len(COMPARED), seconds_sglang=round(t_engine, 1), seconds_kbench=round(t_kbench, 1))
    print("\nparity with SGLang 0.5.23's resolve_once:", json.dumps(counts))
    if os.environ.get("KBENCH_PARITY_TABLE"):
        Path(os.environ["KBENCH_PARITY_TABLE"]).write_text(json.dumps({"counts": counts, "wrong": wrong}, indent=1))
    assert not wrong, f"{len(wrong)} disagreements, e.g.\n" + "\n".join(wrong[:25])
    assert counts["started"] >= 500 and counts["refused_by_sglang"] >= 50
    assert counts["equal"] == counts["fields"] == counts["started"] * len(COMPARED)


# ---- every rule is cited in the released source -------------------------------------------------------------------
def _cited(where: str):
    """(file, first, last) of each `file:a-b, c` piece of a cite."""
    for part in where.split(";"):
        m = re.match(r"\s*([\w/.]+\.py)(?::([\d\-, ]+))?", part)
        if not m:
            continue
        for rng in (m.group(2) or "").split(","):
            rng = rng.strip()
            if rng:
                a, _, b = rng.partition("-")
                yield m.group(1), int(a), int(b or a)


def _check_cites(rs, root: Path):
    cites = [r.cite for r in rs.rules] + [s["cite"] for s in rs.flags.values() if "cite" in s]
    cites += list(rs.defaults_cite.values())
    missing = []
    n = 0
    for where in cites:
        for file, a, b in _cited(rs.cite(where)):
            path = root / file[len(rs.root):] if file.startswith(rs.root) else root / file
            if not path.is_file():
                missing.append(f"{file}: no such file")
                continue
            length = len(path.read_text(errors="replace").splitlines())
            n += 1
            if not (1 <= a <= b <= length):
                missing.append(f"{file}:{a}-{b} beyond its {length} lines")
    return n, missing


def test_every_sglang_rule_is_cited_in_the_released_source(sglang_resolve):  # noqa: F811
    """Each rule and flag of sglang-0.5.23.toml names file:line of the installed sglang 0.5.23 (the wheel the
    parity test runs), and every line it names exists."""
    r = subprocess.run([str(sglang_resolve), "-c", "import sglang, os; print(os.path.dirname(sglang.__file__))"],
                       capture_output=True, text=True)
    root = Path(r.stdout.strip()) / "srt"
    rs = load_rules("sglang", "0.5.23")
    assert all(rule.cite for rule in rs.rules)
    n, missing = _check_cites(rs, root)
    assert not missing and n >= len(rs.rules), missing


def test_every_vllm_rule_is_cited_in_the_released_source():
    """vllm-0.34.0.toml's cites against the released sdist (unpacked where $KBENCH_VLLM_SRC points: `pip download
    --no-deps --no-binary :all: vllm==0.34.0` and untar; skipped without it)."""
    src = os.environ.get("KBENCH_VLLM_SRC")
    if not src or not Path(src, "vllm").is_dir():
        pytest.skip("KBENCH_VLLM_SRC (the unpacked vllm 0.34.0 sdist) not set")
    rs = load_rules("vllm", "0.34.0")
    assert all(rule.cite for rule in rs.rules)
    n, missing = _check_cites(rs, Path(src) / "vllm")
    assert not missing and n >= len(rs.rules), missing


# ---- vLLM 0.34.0: the issue's lines, each decided by a cited rule ---------------------------------------------------
SC = "--speculative-config '{\"method\": \"eagle\", \"model\": \"D\", \"num_speculative_tokens\": 3}'"
VLLM_LINES = [
    # (GPU, model, flags, {field: value} or the refusal's words, the rule that decides it)
    ("sm90", "llama", f"{SC} --attention-backend auto", {"attention_backend": "FLASH_ATTN"}, "backend_auto"),
    ("sm100", "llama", f"{SC} --attention-backend AUTO", {"attention_backend": "FLASHINFER"}, "backend_auto"),
    ("sm90", "llama", f"{SC} --attention-backend FLASHINFER -ac '{{\"backend\": \"FLASH_ATTN\"}}'",
     "attention_backend and attention_config.backend are mutually exclusive", "backend_twice"),
    ("sm90", "deepseek-v3", f"{SC} --attention-backend FLASHMLA --block-size 32", "FLASHMLA: block_size not supported",
     "block_flashmla"),
    ("sm90", "deepseek-v3", f"{SC} --attention-backend FLASHMLA --block-size 64", {"block_size": 64}, "block_flashmla"),
    ("sm90", "llama", f"{SC} --disable-log-requests", "unrecognized arguments: --disable-log-requests", None),
    ("sm90", "llama", "--spec-method eagle --spec-model D --spec-tokens 3",
     {"method": "eagle", "num_speculative_tokens": 3}, "spec_merge"),
    ("sm90", "llama", f"{SC} --spec-tokens 5", "--spec-tokens and --speculative-config['num_speculative_tokens'] "
     "are mutually exclusive", "spec_tokens_twice"),
    ("sm100", "deepseek-v3", f"{SC} --attention-backend CUTLASS_MLA", {"block_size": 128}, "block_preferred_cutlass"),
    ("sm100", "deepseek-v3", f"{SC} --attention-backend CUTLASS_MLA --block-size 64",
     "CUTLASS_MLA: block_size not supported", "block_cutlass_mla"),
    ("sm100", "deepseek-v3", SC, {"attention_backend": "FLASHINFER_MLA", "block_size": 64}, "default_mla_sm100"),
    ("sm90", "deepseek-v3", f"{SC} --kv-cache-dtype fp8", {"attention_backend": "FLASHMLA"}, "default_mla_fp8"),
    ("sm90", "deepseek-v3", f"{SC} --attention-backend FLASH_ATTN_MLA --kv-cache-dtype fp8",
     "kv_cache_dtype not supported", "fa_mla_fp8"),
    ("sm90", "llama", f"{SC} --tensor-parallel-size 8 --enforce-eager --kv-cache-dtype fp8_e4m3",
     {"tensor_parallel_size": 8, "enforce_eager": True, "kv_cache_dtype": "fp8_e4m3"}, None),
    ("sm90", "llama", f"{SC} -tp 2", {"tensor_parallel_size": 2}, None),
]


@pytest.mark.parametrize("gpu, model, flags, want, rule", VLLM_LINES)
def test_vllm_lines_resolve_by_their_cited_rule(gpu, model, flags, want, rule, tmp_path):
    folders = write_folders(tmp_path)
    line = f"vllm serve {folders[model]} {flags}"
    if isinstance(want, str):
        with pytest.raises(Refused) as e:
            resolve_line(line, gpu)
        assert want in str(e.value) and "\n" not in str(e.value) and "vllm/" in str(e.value)
        return
    r = resolve_line(line, gpu)
    assert {k: r.fields[k] for k in want} == want
    if rule is not None:
        assert load_rules("vllm").rule(rule).cite  # the rule that decides it exists, with its cite
