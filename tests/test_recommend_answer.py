"""kbench recommend's answer as a user reads it (issue 52): it fits a screen, it prices what the line runs (TP,
DP attention, fp8 KV, eager, the speculative algorithm) or says why not, and the committed baselines' answers
say which rows they stand on. The figures come from the committed H100 baselines in results/baselines/ (tests/
committed.py) or from the synthetic runs of tests/recommend_synth.py, whose prices are computed there."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "results" / "baselines"
ROUTES = BASE / "h100-engine-routes-page1-64-kv4096-r2"  # chains and topk:4 trees, pages 1 and 64
ROUTES_CHAIN = BASE / "h100-engine-routes-kv4096"  # chains only, page 64
DS = BASE / "h100-deepseek-mtp-kv4096-32768"  # DeepSeek MLA, 128 heads on one GPU
DS_TP8 = BASE / "h100-deepseek-mtp-tp8-kv4096-32768"  # DeepSeek MLA, 16 heads per GPU (TP8)
EAGLE = ("python -m sglang.launch_server --model-path MODEL_PATH --speculative-algorithm EAGLE "
         "--speculative-draft-model-path DRAFT_MODEL_PATH")
CHAIN = " --speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4"
NEXTN = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --speculative-algorithm NEXTN"


def cli(*args, columns: int = 100):
    from kbench.cli.recommend_cmd import recommend_cmd

    return CliRunner().invoke(recommend_cmd, [str(a) for a in args], env={"COLUMNS": str(columns)})


# ---- an answer that fits a screen -------------------------------------------------------------------------
def test_the_plain_eagle_lines_answer_fits_a_screen_and_all_lists_every_setting():
    """The plain EAGLE line (SGLang's (5, 4, 8) tree) at bs 16: 277 lines at 100 columns before (9 of 11 rows
    'refused by the engine', each wrapped over 5-8 lines); now the headline first and at most 30 lines."""
    args = (ROUTES, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE)
    r = cli(*args)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) <= 30, f"{len(lines)} lines:\n{r.output}"
    assert lines[0].startswith("you run: fa3")  # the headline first
    text = " ".join(r.output.split())
    # the settings SGLang refuses for a tree are one line, counted, and --all lists them
    assert "8 settings not priced, need topk 1" in text and "`--all` lists them" in text
    assert text.count("refused by the engine") == 0
    full = cli(*args, "--all", columns=400)  # wide: no cell folds, so each id reads whole
    assert full.exit_code == 0
    from kbench.recommend.settings import load_table

    for s in load_table().engine("sglang").valid_on("sm90"):
        assert f" {s.id} " in full.output, s.id
    assert full.output.count("refused by the engine") >= 8  # the reasons, each as the engine gives it
    assert len(cli(*args, "--all").output.splitlines()) > 4 * len(lines)


def test_a_chain_line_on_the_screen_shows_priced_settings_only_and_the_command_whole():
    r = cli(ROUTES, "--engine", "sglang", "--batch-size", "16", "--kv-len", "4096", "--model", "llama3-8b",
            "--current", EAGLE + CHAIN + " --page-size 64")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("you run: flashinfer") and len(lines) <= 45
    cmd = next(x for x in lines if x.startswith("set: "))
    assert cmd.endswith("--attention-backend fa3")  # one line, whole, at any width
    assert "not priced: refused" not in r.output
