"""Draft trees: which draft tokens each verified draft token may see (the `tree` case axis, issue #26).

A request verifies q_len draft tokens; token 0 is the root (the token the last step verified, as in
SGLang's EAGLE worker) and every other token has one parent among the tokens before it, so a tree is its
list of parents, `-1` for the root: ``(-1, 0, 0, 1)`` is a root with two children and a grandchild under the
first. A token sees the whole prefix, itself and its ancestors; a chain ``(-1, 0, 1, ...)`` is the causal
block kbench measured before trees.

Tree specs (the axis's values):
  chain        every token's parent is the token before it (the default; old case ids unchanged)
  topk:K       a seeded random tree shaped as EAGLE-2 builds them (below); topk:1 is a chain and is spelled
               `chain`
  file:PATH    one request a line: the parent of each draft token, -1 for the root, separated by blanks or
               commas ('#' starts a comment); request r of a batch gets line r modulo the number of lines

The EAGLE-like generator (what SGLang's EAGLE worker does with --speculative-eagle-topk K,
--speculative-num-steps S, --speculative-num-draft-tokens n; see eagle_utils / build_eagle_tree.py):
  - step 1: the draft model expands the root into its K most probable children; a node's score is the
    product of the draft probabilities on its path from the root;
  - step s > 1: each of the K best nodes found in step s - 1 is expanded into its K most probable children
    (K * K candidates); the K best of those by score are the nodes step s + 1 expands;
  - after S steps, the n - 1 best candidates by score (the root is always in) are the tree; they are ordered
    by step, then by their place in the step (SGLang sorts the chosen candidate indices), so parents come
    before children. A child's score is below its parent's, so the chosen set always holds every chosen
    node's parent.
  kbench's choices, where SGLang's are the model's: S = ceil((n - 1) / K) draft steps (enough candidates, K +
  (S - 1) K^2 >= n - 1, and S = n - 1 for K = 1, a chain); the draft probabilities of one expansion are the
  top K of softmax(z) with z ~ N(0, 3^2) over 32 candidate tokens (peaked as draft models are: the top token
  has about 0.2 to 0.6 of the mass); the numbers come from numpy's PCG64 seeded with (sweep seed, request,
  K, n). Every node has at most K children and the tree has at most S + 1 levels.

With a ragged q_dist each request r brings its own q_r <= q_len tokens: a topk:K request gets the topk:K
tree of q_r tokens, a file request the first q_r tokens of its line (a prefix of a parents-first list is a
tree). Rows record the spec (the `tree` column), the deepest and widest tree of the batch and a hash of its
parent lists.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from kbench import files
from kbench.errors import BadInput

KINDS = ("chain", "topk", "file")
MAX_FILE_TREES = 1_000_000
DRAFT_VOCAB = 32  # candidate tokens per draft expansion
DRAFT_LOGIT_SIGMA = 3.0  # spread of the draft logits: how peaked the draft model is


@dataclass(frozen=True)
class TreeSpec:
    kind: str  # chain | topk | file
    arg: object = None  # K for topk, the path for file

    @property
    def text(self) -> str:
        """The canonical spelling (what scenarios, rows and case ids hold)."""
        if self.kind == "chain":
            return "chain"
        return f"{self.kind}:{self.arg}"

    @property
    def id_part(self) -> str | None:
        """The case_id fragment (None for a chain, so old case ids do not change)."""
        if self.kind == "chain":
            return None
        if self.kind == "file":
            return "treefile-" + Path(str(self.arg)).name
        return f"treetopk{self.arg}"


def parse_tree(text) -> TreeSpec:
    """A tree spec; ValueError(text) when it does not parse. topk:1 is a chain."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected chain, topk:K or file:PATH (as a string), got {text!r}")
    kind, sep, arg = text.strip().partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    if kind not in KINDS:
        raise ValueError(f"unknown tree {kind!r} (use chain, topk:K or file:PATH)")
    if kind == "chain":
        if sep:
            raise ValueError(f"'chain' takes no parameter, got {text!r}")
        return TreeSpec("chain")
    if kind == "file":
        if not arg:
            raise ValueError("file: needs a path (file:PATH)")
        return TreeSpec("file", arg)
    if not re.fullmatch(r"-?[0-9]+", arg):  # ASCII digits only (int() takes '١٢' too)
        raise ValueError(f"topk:K needs an integer K (digits 0-9), got {text!r}")
    k = int(arg)
    if k < 1:
        raise ValueError(f"topk K must be >= 1, got {k}")
    return TreeSpec("chain") if k == 1 else TreeSpec("topk", k)


def canonical(item: str) -> str:
    """The axis table's spec check: item -> canonical spelling, ValueError if bad."""
    return parse_tree(item).text


def id_part(text: str) -> str | None:
    return parse_tree(text).id_part


# ---- the EAGLE-like generator ---------------------------------------------------------------------------
def draft_steps(n: int, k: int) -> int:
    """The number of draft steps kbench gives a topk:K tree of n tokens."""
    return max(1, math.ceil((n - 1) / k)) if n > 1 else 0


def chain(n: int) -> tuple[int, ...]:
    return tuple(range(-1, n - 1))


def eagle_tree(n: int, k: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A topk:K tree of n tokens (parents list), built as the module docstring says."""
    if n <= 1:
        return (-1,)
    if k == 1:
        return chain(n)
    steps = draft_steps(n, k)
    # candidates: (score, step, slot, parent candidate or -1 for the root); slot orders a step's candidates
    # as SGLang's flattened score list does: frontier position major, child rank minor
    cands: list[tuple[float, int, int, int]] = []

    def children(score: float) -> np.ndarray:
        z = rng.normal(0.0, DRAFT_LOGIT_SIGMA, DRAFT_VOCAB)
        p = np.exp(z - z.max())
        p /= p.sum()
        return score * np.sort(p)[::-1][:k]

    frontier = [-1]  # candidate indices expanded by the next step (-1: the root, score 1)
    for step in range(steps):
        start = len(cands)
        for pos, parent in enumerate(frontier):
            base = 1.0 if parent < 0 else cands[parent][0]
            for rank, s in enumerate(children(base)):
                cands.append((float(s), step, pos * k + rank, parent))
        new = range(start, len(cands))
        frontier = sorted(new, key=lambda i: (-cands[i][0], i))[:k]
    chosen = sorted(range(len(cands)), key=lambda i: (-cands[i][0], i))[: n - 1]
    chosen.sort(key=lambda i: (cands[i][1], cands[i][2]))  # by step, then place: parents first
    index = {c: t + 1 for t, c in enumerate(chosen)}  # candidate -> token (token 0 is the root)
    parents = [-1]
    for c in chosen:
        p = cands[c][3]
        parents.append(0 if p < 0 else index[p])  # a chosen node's parent scores higher: it is chosen
    return tuple(parents)


# ---- files ----------------------------------------------------------------------------------------------
def check_parents(parents: list[int]) -> str | None:
    """Why a parents list is not a tree kbench takes (its first problem), or None."""
    n = len(parents)
    for i, p in enumerate(parents):
        if p < -1 or p >= n:
            return f"token {i}'s parent {p} is not a token of this tree (0..{n - 1}, or -1 for the root)"
    for i in range(n):  # a walk up from i that comes back to a token it passed is a cycle
        seen, j = [], i
        while j >= 0 and j not in seen:
            seen.append(j)
            j = parents[j]
        if j >= 0:
            loop = seen[seen.index(j):] + [j]
            return "tokens " + " -> ".join(map(str, loop)) + " form a cycle (each arrow goes to a parent)"
    roots = [i for i, p in enumerate(parents) if p == -1]
    if len(roots) > 1:
        return f"tokens {roots[0]} and {roots[1]} are both roots (-1); a tree has one root, token 0"
    for i, p in enumerate(parents):
        if p >= i:
            return (f"token {i}'s parent {p} is a forward reference (a parent comes before its children, "
                    f"as engines order a draft tree)")
    return None


def _read(path: str) -> tuple[tuple[tuple[int, ...], int], ...] | str:
    """The file's trees with their line numbers, or the first problem (as text); read again when the file
    changed."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError as e:
        return f"cannot read {path}: {e.strerror or e}"
    return _parse_file(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _parse_file(path: str, mtime_ns: int, size: int) -> tuple[tuple[tuple[int, ...], int], ...] | str:
    try:  # as every file kbench did not write: a regular file, size-capped, strict UTF-8 (kbench.files)
        text = files.read_text(Path(path).expanduser(), f"cannot read {path}", files.WORKLOAD_MAX, bom=True)
    except BadInput as e:
        return str(e)
    trees = []
    for lineno, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        tokens = [t for t in re.split(r"[,\s]+", body) if t]
        values = []
        for i, t in enumerate(tokens):
            if not re.fullmatch(r"-?[0-9]+", t):
                return f"{path}: line {lineno} (request {len(trees)}): token {i}'s parent is not an integer: {t!r}"
            values.append(int(t))
        why = check_parents(values)
        if why:
            return f"{path}: line {lineno} (request {len(trees)}): {why}"
        if trees and len(values) != len(trees[0][0]):
            first = trees[0]
            return (f"{path}: line {lineno} (request {len(trees)}): {len(values)} tokens, but line {first[1]} has "
                    f"{len(first[0])}: one tree size a file (the q_len it is measured at)")
        trees.append((tuple(values), lineno))
        if len(trees) > MAX_FILE_TREES:
            return f"{path}: more than {MAX_FILE_TREES} trees"
    if not trees:
        return f"{path} holds no trees (one request a line: the parent of each draft token, -1 for the root)"
    return tuple(trees)


def read_tree_file(path: str, where: str = "scenario", field: str = "tree") -> list[tuple[int, ...]]:
    """The trees of a file, one a line; a bad file raises BadInput naming the line and request."""
    got = _read(str(path))
    if isinstance(got, str):
        raise BadInput(f"{where}: {field}: {got}")
    return [t for t, _ in got]


def file_tree_size(path: str, where: str = "scenario") -> int:
    return len(read_tree_file(path, where, "grid.tree")[0])


# ---- a batch's trees ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchTrees:
    """One parents list per request (request r's list has q_r tokens)."""

    spec: str
    parents: tuple[tuple[int, ...], ...]

    def summary(self) -> dict:
        """Row columns: the deepest tree's levels, the widest level of any tree, a hash of the lists."""
        digest = hashlib.sha1(";".join(",".join(map(str, p)) for p in self.parents).encode()).hexdigest()[:12]
        return {"tree_depth": max(depth(p) for p in self.parents),
                "tree_width": max(width(p) for p in self.parents), "tree_hash": digest}


def levels(parents) -> list[int]:
    """Each token's level (the root is level 0); parents come first."""
    lv: list[int] = []
    for p in parents:
        lv.append(0 if p < 0 else lv[p] + 1)
    return lv


def depth(parents) -> int:
    """The number of levels (a chain of n tokens has n, a star has 2)."""
    return max(levels(parents)) + 1


def width(parents) -> int:
    """The number of tokens on the widest level."""
    lv = levels(parents)
    return max(lv.count(v) for v in set(lv))


def fits(spec: str, q_len: int, where: str = "scenario") -> bool:
    """Whether a tree spec has a tree of q_len tokens: topk:K needs K <= q_len, a file's trees have one size."""
    t = parse_tree(spec)
    if t.kind == "topk":
        return t.arg <= q_len
    if t.kind == "file":
        return file_tree_size(str(t.arg), where) == q_len
    return True


def check_grid(specs: list[str], q_lens: list[int], where: str, strict: bool = True) -> None:
    """Refuse a tree spec that fits no q_len of the grid (the combinations it does not fit are left out of
    the grid, see kbench.cases.scenario); reads every file once, so a bad one stops here. strict (the specs a
    user named with --tree): every spec must fit some q_len. Not strict (a scenario's own specs, perhaps on a
    grid narrowed by --q-len): a spec that fits none is left out like any other pair that cannot exist
    (left_out() names it), and only a grid left with no tree at all is refused."""
    problems = []
    for s in specs:
        t = parse_tree(s)
        if t.kind == "topk" and t.arg > max(q_lens):
            problems.append(f"{where}: grid.tree: topk:{t.arg} is above the tree size (q_len {max(q_lens)}): a tree "
                            f"of q_len tokens has at most q_len - 1 children under its root; give K <= q_len")
        elif t.kind == "file":
            n = len(read_tree_file(str(t.arg), where, "grid.tree")[0])
            if n not in q_lens:
                problems.append(f"{where}: grid.tree: {t.arg} holds trees of {n} tokens, a wrong token count for every "
                                f"q_len of the grid ({', '.join(map(str, q_lens))}); measure it with --q-len {n}")
    if problems and (strict or len(problems) == len(specs)):
        raise BadInput(problems[0])


def left_out(specs: list[str], q_lens: list[int], where: str = "scenario") -> list[str]:
    """The specs that fit no q_len of the grid (left out of a scenario's grid narrowed by --q-len)."""
    return [s for s in specs if not any(fits(s, q, where) for q in q_lens)]


@lru_cache(maxsize=256)
def _topk_trees(k: int, q_lens: tuple[int, ...], seed: int) -> tuple[tuple[int, ...], ...]:
    return tuple(eagle_tree(n, k, np.random.default_rng([seed, 0x7472, r, k, n])) for r, n in enumerate(q_lens))


def batch_trees(spec: str, q_lens: tuple[int, ...], seed: int = 0, where: str = "case") -> BatchTrees:
    """Each request's tree for a batch whose requests bring these q lengths."""
    t = parse_tree(spec)
    if t.kind == "chain":
        return BatchTrees("chain", tuple(chain(n) for n in q_lens))
    if t.kind == "topk":
        return BatchTrees(t.text, _topk_trees(int(t.arg), tuple(q_lens), seed))
    lines = read_tree_file(str(t.arg), where)
    out = []
    for r, n in enumerate(q_lens):
        line = lines[r % len(lines)]
        if n > len(line):
            raise BadInput(f"{where}: tree: {t.arg}: request {r} has {n} draft tokens but its line holds "
                           f"{len(line)} (a wrong token count)")
        out.append(line[:n])
    return BatchTrees(t.text, tuple(out))


def case_trees(case, seed: int = 0) -> BatchTrees:
    """A case's trees, drawn once per seed (its q lengths from case.lengths)."""
    return batch_trees(case.tree, tuple(case.lengths(seed).q), seed)
