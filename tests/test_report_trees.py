"""The report's "Tree vs chain" section, and policy / select / gate keyed on the tree (issue #26), on
synthetic runs with known answers."""
from __future__ import annotations

import json

from click.testing import CliRunner
from report_synth import DECODE, FA2, case, row, write_run

from kbench.cli.main import cli
from kbench.report import build_report
from kbench.report.policy import load_policy, lookup
from kbench.report.trees import tree_blocks, tree_table
from kbench.report.realistic import with_defaults
from kbench.runs.store import load_run

SKIP = "tree: skipped"


def tree_rows():
    """xqa (trtllm-decode) takes a tree in the chain's time; fa2 pays 2x for its custom mask. A chain: fa2 wins
    at q 8, xqa at q 16; a topk:4 tree: xqa wins both, and costs 1.0x at q 16 and (10 / 8) at q 8."""
    rows = []
    for q, xqa, fa2 in ((8, 10.0, 8.0), (16, 12.0, 14.0)):
        chain, tree = case(16, q, 4096), case(16, q, 4096, tree="topk:4")
        rows += [row(DECODE, chain, xqa), row(FA2, chain, fa2), row(DECODE, tree, xqa), row(FA2, tree, 2 * fa2),
                 row("fa3-prefill", tree, None, status="skipped", path="context", reason=SKIP)]
    return rows


def test_tree_table_pairs_each_tree_with_its_chain(tmp_path):
    run = write_run(tmp_path / "run", tree_rows())
    ok = with_defaults(load_run(run).rows.query("status == 'ok' and path != 'reference'"))
    headers, rows = tree_table(ok)
    assert headers[3] == "chain winner" and headers[5] == "tree winner"
    by_q = {r[0].split(" q")[1].split(" ")[0]: r for r in rows}
    q8, q16 = by_q["8"], by_q["16"]
    assert q8[1].startswith("topk:4 (") and "levels" in q8[1]
    assert q8[3] == "fa2-prefill by 1.25x" and q8[5] == "trtllm-decode by 1.60x" and q8[7] == "1.25x"
    assert q16[3] == "trtllm-decode by 1.17x" and q16[7] == "1.00x"
    assert "fa2-prefill 2.00x" in q8[8] and "trtllm-decode 1.00x" in q8[8]


def test_report_has_the_section_and_the_policy_keys_on_the_tree(tmp_path):
    run = write_run(tmp_path / "run", tree_rows())
    res = build_report([run], tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Tree vs chain" in md and "the best kernel differs in 1" in md
    assert "## Realistic batches" not in md  # a tree has its own section; no empty one
    groups = {g["tree"]: g for g in res.policy["groups"]}
    assert set(groups) == {"chain", "topk:4"} and groups["topk:4"]["label"].endswith("tree=topk:4")
    pol = load_policy(tmp_path / "rep" / "policy.json")
    assert lookup(pol, batch_size=16, q_len=8, kv_len=4096, tree="topk:4")["kernel"] == DECODE
    assert lookup(pol, batch_size=16, q_len=8, kv_len=4096, tree="chain")["kernel"] == FA2
    r = CliRunner().invoke(cli, ["select", "--policy", str(tmp_path / "rep" / "policy.json"), "--batch-size", "16",
                                 "--q-len", "8", "--kv-len", "4096", "--tree", "topk:4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["kernel"] == DECODE
    r = CliRunner().invoke(cli, ["select", "--policy", str(tmp_path / "rep" / "policy.json"), "--batch-size", "16",
                                 "--q-len", "8", "--kv-len", "4096"])
    assert r.exit_code == 2 and "--tree" in r.output  # two groups differ in the tree: say which
    r = CliRunner().invoke(cli, ["select", "--policy", str(tmp_path / "rep" / "policy.json"), "--batch-size", "16",
                                 "--q-len", "8", "--kv-len", "4096", "--tree", "topk:0"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "topk K must be >= 1" in r.output


def test_an_older_policy_without_the_tree_key_reads_as_chains(tmp_path):
    run = write_run(tmp_path / "run", [row(DECODE, case(16, 8, 4096), 10.0), row(FA2, case(16, 8, 4096), 12.0)])
    build_report([run], tmp_path / "rep")
    p = json.loads((tmp_path / "rep" / "policy.json").read_text())
    for g in p["groups"]:
        del g["tree"]
    (tmp_path / "old.json").write_text(json.dumps(p))
    assert lookup(load_policy(tmp_path / "old.json"), batch_size=16, q_len=8, kv_len=4096, tree="chain")["kernel"] == DECODE


def test_gate_matches_on_the_tree(tmp_path):
    """A tree row and a chain row of the same shape are different gate keys: a slower tree is no regression
    of the chain."""
    base = write_run(tmp_path / "base", tree_rows())
    slower = [row(r.kernel, case(16, r.q_len, 4096, tree=r.tree), r.median_us * (1.5 if r.tree != "chain" else 1.0))
              for r in tree_rows() if r.status == "ok"]
    cand = write_run(tmp_path / "cand", slower)
    r = CliRunner().invoke(cli, ["gate", "--baseline", str(base), "--candidate", str(cand)])
    assert r.exit_code == 1, r.output
    assert "treetopk4" in r.output


def test_no_section_without_tree_rows(tmp_path):
    run = write_run(tmp_path / "run", [row(DECODE, case(16, 8, 4096), 10.0)])
    assert tree_blocks(load_run(run).rows) == []
