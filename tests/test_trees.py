"""Draft trees as a case axis (issue #26): the spec syntax, the EAGLE-like generator, the parent-file format,
the grid (a spec runs at the tree sizes it fits), the row columns and every kind of bad input (one line
naming the field and the request, exit 2)."""
from __future__ import annotations

import numpy as np
import pytest

from kbench.cases import axes
from kbench.cases import trees as T
from kbench.cases.case import Case
from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.errors import BadInput
from kbench.runs.rows import COLUMNS, Row


def kbench(*args):
    from click.testing import CliRunner

    from kbench.cli.main import cli

    return CliRunner().invoke(cli, list(args))


# ---- the spec ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canon", [("chain", "chain"), (" Chain ", "chain"), ("topk:1", "chain"),
                                         ("topk:4", "topk:4"), ("TOPK: 8", "topk:8"), ("file:a/b.txt", "file:a/b.txt")])
def test_spec_canonical(text, canon):
    assert T.canonical(text) == canon


@pytest.mark.parametrize("text, words", [("topk:0", "K must be >= 1"), ("topk:-2", "K must be >= 1"),
                                         ("topk:x", "integer K"), ("topk", "integer K"), ("chain:3", "no parameter"),
                                         ("star", "unknown tree"), ("file:", "needs a path")])
def test_spec_refused(text, words):
    with pytest.raises(ValueError, match=words):
        T.parse_tree(text)


def test_axis_roles_and_case_ids():
    a = axes.AXIS["tree"]
    assert a.default == "chain" and {axes.GRID, axes.GROUP, axes.GATE, axes.REALISTIC} <= a.roles
    assert "tree" in axes.GROUP_COLUMNS and "tree" in axes.gate_key()
    base = Case(16, 8, 4096, 32, 8, 128)
    assert base.case_id == "bs16-q8-kv4096-h32.8.128-p64-HND-bf16"  # a chain adds nothing: old ids unchanged
    assert Case(16, 8, 4096, 32, 8, 128, tree="topk:4").case_id == base.case_id + "-treetopk4"
    assert Case(16, 8, 4096, 32, 8, 128, tree="file:/x/y/star8.txt").case_id == base.case_id + "-treefile-star8.txt"
    assert Case(16, 8, 4096, 32, 8, 128, tree="topk:4").realistic
    assert {"tree", "tree_depth", "tree_width", "tree_hash"} <= set(COLUMNS)


# ---- the generator ----------------------------------------------------------------------------------------
def children(parents):
    return [sum(1 for p in parents if p == i) for i in range(len(parents))]


@pytest.mark.parametrize("n", [2, 4, 5, 8, 16, 33, 64])
@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_eagle_tree_is_a_tree_of_n_tokens_with_at_most_k_children(n, k):
    if k > n:
        return
    for seed in range(3):
        p = T.eagle_tree(n, k, np.random.default_rng([seed, n, k]))
        assert len(p) == n and p[0] == -1
        assert T.check_parents(list(p)) is None  # parents first, one root, no cycle
        assert max(children(p)) <= k
        assert T.depth(p) <= T.draft_steps(n, k) + 1  # at most one level per draft step below the root


def test_topk_1_is_the_chain_and_the_batch_is_seeded():
    assert T.eagle_tree(9, 1, np.random.default_rng(0)) == T.chain(9) == (-1, 0, 1, 2, 3, 4, 5, 6, 7)
    a = T.batch_trees("topk:4", (16, 16, 16), seed=0)
    assert a == T.batch_trees("topk:4", (16, 16, 16), seed=0)
    assert a != T.batch_trees("topk:4", (16, 16, 16), seed=1)
    assert len(set(a.parents)) > 1  # each request draws its own tree
    assert T.batch_trees("chain", (3, 2), 0).parents == ((-1, 0, 1), (-1, 0))


def test_eagle_tree_of_k_plus_1_tokens_is_one_draft_step():
    """ceil((n - 1) / K) draft steps: a topk:K tree of K + 1 tokens is the root's K children (a star)."""
    for k in (2, 4, 8):
        p = T.eagle_tree(k + 1, k, np.random.default_rng(k))
        assert p == (-1,) + (0,) * k


def test_summary_depth_width_hash():
    star, chain8 = T.BatchTrees("file:s", ((-1,) + (0,) * 7,)), T.BatchTrees("chain", (T.chain(8),))
    assert star.summary()["tree_depth"] == 2 and star.summary()["tree_width"] == 7
    assert chain8.summary()["tree_depth"] == 8 and chain8.summary()["tree_width"] == 1
    assert star.summary()["tree_hash"] != chain8.summary()["tree_hash"]
    case = Case(4, 8, 256, 8, 2, 64, 16, tree="topk:4")
    row = Row.for_case("reference", "reference", "reference", case, "ok")
    assert row.tree == "topk:4" and 2 <= row.tree_depth <= 8 and row.tree_width >= 2 and len(row.tree_hash) == 12


def test_ragged_q_gives_each_request_its_own_tree():
    case = Case(8, 8, 256, 8, 2, 64, 16, tree="topk:2", q_dist="accept:0.6")
    b = case.lengths(0)
    trees = T.case_trees(case, 0)
    assert [len(p) for p in trees.parents] == list(b.q)
    assert len(set(b.q)) > 1


# ---- files ------------------------------------------------------------------------------------------------
STAR8 = "-1 0 0 0 0 0 0 0\n"


def test_file_trees_cycle_over_the_batch(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("# two trees of 4 tokens\n-1 0 0 1\n\n-1,0,1,1   # a comment\n")
    trees = T.batch_trees(f"file:{f}", (4, 4, 4, 4, 4), 0)
    assert trees.parents == ((-1, 0, 0, 1), (-1, 0, 1, 1)) * 2 + ((-1, 0, 0, 1),)
    # ragged q: request r keeps the first q_r tokens of its line (a prefix of a parents-first list is a tree)
    assert T.batch_trees(f"file:{f}", (2, 3), 0).parents == ((-1, 0), (-1, 0, 1))


BAD_FILES = {
    "cycle": ("-1 0 0 1\n-1 2 1 0\n", "line 2 (request 1): tokens 1 -> 2 -> 1 form a cycle"),
    "self-parent": ("-1 1 0 0\n", "line 1 (request 0): tokens 1 -> 1 form a cycle"),
    "forward reference": ("-1 0 3 0\n", "line 1 (request 0): token 2's parent 3 is a forward reference"),
    "second root": ("-1 0 0 0\n-1 0 -1 2\n", "line 2 (request 1): tokens 0 and 2 are both roots"),
    "no root at token 0": ("1 -1 1 1\n", "token 0's parent 1 is a forward reference"),
    "out of range": ("-1 0 9 0\n", "token 2's parent 9 is not a token of this tree"),
    "non-integer": ("-1 0 0 1\n-1 0 x 1\n", "line 2 (request 1): token 2's parent is not an integer: 'x'"),
    "float": ("-1 0 0.5 1\n", "token 2's parent is not an integer: '0.5'"),
    "token count": ("-1 0 0 1\n-1 0 0\n", "line 2 (request 1): 3 tokens, but line 1 has 4"),
    "empty": ("\n# nothing\n\n", "holds no trees"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_tree_file_is_one_line_exit_2(tmp_path, name):
    text, words = BAD_FILES[name]
    f = tmp_path / "trees.txt"
    f.write_text(text)
    r = kbench("sweep", "--scenario", "quick", "--q-len", "4", "--tree", f"file:{f}", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: ")
    assert "grid.tree" in r.output and words in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "o").exists()


def test_missing_file_and_wrong_size_for_the_grid(tmp_path):
    r = kbench("sweep", "--scenario", "quick", "--tree", f"file:{tmp_path}/none.txt")
    assert r.exit_code == 2 and "cannot read" in r.output and "grid.tree" in r.output
    f = tmp_path / "star8.txt"
    f.write_text(STAR8)
    r = kbench("sweep", "--scenario", "quick", "--q-len", "4,16", "--tree", f"file:{f}")
    assert r.exit_code == 2 and "holds trees of 8 tokens, a wrong token count" in r.output, r.output


@pytest.mark.parametrize("spec, words", [("topk:0", "K must be >= 1"), ("topk:9", "topk:9 is above the tree size"),
                                         ("topk:x", "integer K")])
def test_bad_topk_is_one_line_exit_2(spec, words):
    r = kbench("sweep", "--scenario", "quick", "--q-len", "2,8", "--tree", spec)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and words in r.output and "tree" in r.output, r.output


def test_a_spec_runs_at_the_tree_sizes_it_fits(tmp_path):
    """topk:K at q_len >= K only; a file at its own tree size; the chain everywhere."""
    f = tmp_path / "star8.txt"
    f.write_text(STAR8 * 2)
    sc = apply_overrides(load_scenario("quick"), q_len="2,4,8", tree=f"chain,topk:4,file:{f}")
    got = sorted((c.tree.split(":")[0] + (c.tree.split(":")[1] if c.tree.startswith("topk") else ""), c.q_len)
                 for c in sc.cases() if c.batch_size == sc.batch_size[0] and c.kv_len == sc.kv_len[0])
    assert got == [("chain", 2), ("chain", 4), ("chain", 8), ("file", 8), ("topk4", 4), ("topk4", 8)]


def test_eagle_tree_scenario():
    sc = load_scenario("eagle-tree")
    assert sc.model == "llama3-8b" and sc.q_len == [4, 8, 16, 32, 64]
    assert sc.tree == ["chain", "topk:2", "topk:4", "topk:8"]
    assert sc.batch_size[0] == 1 and sc.batch_size[-1] == 64 and sc.kv_len == [1024, 2048, 4096, 8192, 16384, 32768]
    cases = sc.cases()
    per_shape = len(sc.batch_size) * len(sc.kv_len)
    assert len(cases) == per_shape * (5 * 4 - 1)  # topk:8 has no tree of 4 tokens
    assert not any(c.tree == "topk:8" and c.q_len == 4 for c in cases)


def test_select_takes_tree(tmp_path):
    r = kbench("select", "--help")
    assert "--tree" in r.output


def test_trees_read_again_when_the_file_changes(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("-1 0 0\n")
    assert T.read_tree_file(str(f)) == [(-1, 0, 0)]
    f.write_text("-1 0 1 # changed\n")
    import os

    os.utime(f, ns=(1, 10**9 * 5))  # another mtime, whatever the clock's resolution
    assert T.read_tree_file(str(f)) == [(-1, 0, 1)]
    with pytest.raises(BadInput, match="request 0"):
        f.write_text("-1 0 5\n")
        os.utime(f, ns=(1, 10**9 * 9))
        T.read_tree_file(str(f))


def test_narrowing_a_tree_scenario_leaves_out_the_pairs_that_cannot_exist(tmp_path):
    """eagle-tree's own topk:8 has no tree of 4 tokens: the full grid leaves that pair out, and so does a grid
    narrowed to --q-len 4 (it was refused); the sweep names what it left out. Specs named with --tree must still
    fit, and a grid left with no tree at all is refused (one line, exit 2)."""
    sc = apply_overrides(load_scenario("eagle-tree"), q_len="4", batch_size="1", kv_len="1024")
    assert sc.trees_left_out() == ["topk:8"]
    assert sorted(c.tree for c in sc.cases()) == ["chain", "topk:2", "topk:4"]
    sc = apply_overrides(load_scenario("eagle-tree"), q_len="1", batch_size="1", kv_len="1024")
    assert [c.tree for c in sc.cases()] == ["chain"] and sc.trees_left_out() == ["topk:2", "topk:4", "topk:8"]
    assert load_scenario("eagle-tree").trees_left_out() == []
    r = kbench("sweep", "-s", "eagle-tree", "--q-len", "4", "-b", "1", "-k", "1024", "--budget", "0.02",
               "--kernels", "reference", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "eagle-tree: 3 cases" in r.output
    assert "note: tree topk:8 has no tree at q_len 4: left out" in r.output
    r = kbench("sweep", "-s", "eagle-tree", "--q-len", "4", "--tree", "chain,topk:8", "--out", str(tmp_path / "o2"))
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "topk:8 is above the tree size (q_len 4)" in r.output
    only = tmp_path / "only-topk8.toml"
    only.write_text('name = "t"\nmodel = "llama3-8b"\n[grid]\nbatch_size = [1]\nq_len = [4, 8]\nkv_len = [1024]\n'
                    'tree = ["topk:8"]\n')
    assert len(load_scenario(str(only)).cases()) == 1
    r = kbench("sweep", "-s", str(only), "--q-len", "4", "--out", str(tmp_path / "o3"))
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "grid.tree: topk:8 is above the tree size (q_len 4)" in r.output and not (tmp_path / "o3").exists()
