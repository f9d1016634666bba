"""kbench's import graph: no cycle, and no upward import across the layers, which are the folders.

Run it: ``python tests/import_graph.py`` (prints the modules and edges per layer and exits 1 on a violation); the
tests run it too (tests/test_import_graph.py). A small script rather than import-linter: import-linter finds a
package's modules under its folder, and kbench.cli / kbench.kernels live in the top-level cli/ and kernels/
folders (pyproject's package-dir, kept by the design card), so it reports them missing.

Every import counts, a function-level (lazy) one too: a lazy import is still a dependency, and hiding a
cycle in a function is what this check is for. Layers, low to high (a module may import its own layer or a
lower one; layers on one rank are peers and may not import each other):
  core     kbench, kbench.errors, kbench.values, kbench.device,   what every layer shares (files: the one
           kbench.files, kbench.names, kbench.frames,            reader of files kbench did not just write;
           kbench.shell, kbench.text, kbench.redact              names: the kernels' names, without torch;
                                                                 frames: fast row iteration over DataFrames;
                                                                 shell: every command kbench prints to run;
                                                                 text: an input's text made safe to show;
                                                                 redact: the one redaction of secrets)
  timing   kbench.timing.*      timers, timing states, clocks and bandwidth probes, the correctness check
  cases    kbench.cases.*       axes, the case, per-request lengths, models, scenarios
  kernels  kbench.kernels.*     inputs, reference, one module per kernel          } peers
  runs     kbench.runs.*        run folders: store, journal, manifest, rows, winners } peers
  engine   kbench.engine.*      sweep, plans, measuring, isolation, devices, JIT, validate-timer
  report   kbench.report.*      winners, crossovers, policy, plots               } peers
  gate     kbench.gate.*        the CI gate over sweep and server runs, baselines, the A/B answer   } peers
  recommend kbench.recommend.*  engine settings, workloads, recommend, export: reads policies and runs (report)
                                and the engine table; a peer of gate (the CLI puts gate's A/B beside it) } peers
  server   kbench.server.*      the live-server benchmark: above the gate, whose rule (kbench.gate.sequential,
                                paired) decides when `--repeat auto` has rounds enough
  cli      kbench.cli.*         the command line
Server sits above gate, not beside it, because `server-bench --repeat auto` stops when the gate's own rule
(kbench.gate.sequential.decide_case, through compare_metric) has decided: one rule, defined in the gate; nothing in
gate or recommend imports server (the gate reads server runs as run folders). Across modules only public names
are used (private_uses below): the seams are named where they are defined.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# package -> folder, as pyproject.toml's package-dir
FOLDERS = {"kbench": ROOT / "kbench", "kbench.cli": ROOT / "cli", "kbench.kernels": ROOT / "kernels"}
CORE = {"kbench", "kbench.errors", "kbench.values", "kbench.device", "kbench.files", "kbench.names", "kbench.frames",
        "kbench.shell", "kbench.text", "kbench.redact"}
# layer -> rank, low to high; equal ranks are peers (neither may import the other)
RANKS = {"core": 0, "timing": 1, "cases": 2, "kernels": 3, "runs": 3, "engine": 4, "report": 5,
         "gate": 6, "recommend": 6, "server": 7,
         "cli": 8}
LAYERS = tuple(RANKS)
# sibling cycles known and accepted, with the reason; a new one fails the check
ALLOWED_SIBLING_CYCLES: dict[tuple[str, ...], str] = {}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        for f in sorted(folder.rglob("*.py")):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if name.startswith("kbench.") and name.split(".")[1] in ("cli", "kernels") and pkg == "kbench":
                continue
            out[name] = f
    return out


def layer(mod: str) -> str:
    """The layer of a module: its folder under kbench (kbench.engine.sweep -> engine), core for the few shared
    modules; any other module loose in kbench/ is "loose", which the check refuses."""
    if mod in CORE:
        return "core"
    part = mod.split(".")[1]
    return part if part in RANKS else "loose"


def _resolve(name: str, known: dict) -> str | None:
    """The longest known module that `name` names (kbench.gate.compare.run_gate -> kbench.gate.compare)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            found = {r for t in targets if (r := _resolve(t, known) if t.startswith("kbench") else None) and r != mod}
            # `from kbench.gate import compare` also names the package kbench.gate: of one statement's targets the
            # most specific only (another statement that takes a name from the package still counts)
            edges[mod] |= {d for d in found if not any(o != d and o.startswith(d + ".") for o in found) or d in CORE}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a higher layer, or of a peer layer (same rank, another folder)."""
    def bad(a: str, b: str) -> bool:
        la, lb = layer(a), layer(b)
        return la != lb and RANKS[lb] >= RANKS[la]

    return sorted((a, b) for a, deps in edges.items() for b in deps if bad(a, b))


def loose(edges: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in edges if layer(m) == "loose")


def sibling(mod: str) -> str:
    """The child of kbench a module belongs to: kbench.gate.compare -> kbench.gate (import-linter's
    acyclic_siblings): two subpackages must not import each other even through different modules."""
    return ".".join(mod.split(".")[:2])


def report() -> tuple[list[list[str]], list[tuple[str, str]], str]:
    edges = graph()
    # a module that imports its own package's __init__ while that __init__ imports it is a cycle (a protocol kept in
    # an __init__ that also picks the implementations): counted as any other; see test_import_graph.py
    siblings: dict[str, set[str]] = {}
    for a, deps in edges.items():
        siblings.setdefault(sibling(a), set()).update(sibling(b) for b in deps if sibling(b) != sibling(a))
    sib = cycles(siblings)
    allowed = [c for c in sib if tuple(c) in ALLOWED_SIBLING_CYCLES]
    cyc = cycles(edges) + [["(subpackages)", *c] for c in sib if c not in allowed]
    up = upward(edges) + [(m, "(a loose module: put it in the folder of its layer)") for m in loose(edges)]
    counts: dict[tuple[str, str], int] = {}
    for a, deps in edges.items():
        for b in deps:
            counts[(layer(a), layer(b))] = counts.get((layer(a), layer(b)), 0) + 1
    per_layer: dict[str, int] = {}
    for m in edges:
        per_layer[layer(m)] = per_layer.get(layer(m), 0) + 1
    order = {name: i for i, name in enumerate((*LAYERS, "loose"))}
    lines = [f"{len(edges)} modules, {sum(map(len, edges.values()))} import edges (lazy imports included)",
             "modules per layer (rank; peers share one): " + ", ".join(
                 f"{name} {n}" + (f" (rank {RANKS[name]})" if name in RANKS else "")
                 for name, n in sorted(per_layer.items(), key=lambda x: order[x[0]])),
             "edges between layers (importer -> imported: count):"]
    lines += [f"  {a:>7} -> {b:<7} {c}" for (a, b), c in sorted(counts.items(), key=lambda x: (order[x[0][0]], order[x[0][1]]), reverse=True)]
    lines.append(f"cycles: {len(cyc)}" + "".join(f"\n  {' <-> '.join(c)}" for c in cyc))
    lines += [f"accepted subpackage cycle: {' <-> '.join(c)}: {ALLOWED_SIBLING_CYCLES[tuple(c)]}" for c in allowed]
    lines.append(f"upward imports: {len(up)}" + "".join(f"\n  {a} -> {b}" for a, b in up))
    return cyc, up, "\n".join(lines)


# The seams between modules are public names: a module that takes another module's `_private` function, class or
# method (`from kbench.gate.compare import _compare_metric`, `runner._row(...)`) depends on what its owner may change
# without notice. The owner names it publicly instead (one definition, every caller). Names Python's own types make
# public with an underscore (a namedtuple's _asdict, os._exit) are not private. Known uses, each with its reason
# (a new one fails the check):
PUBLIC_UNDERSCORE = {"_asdict", "_make", "_replace", "_fields", "_exit"}
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {
    ("kbench.shell", "_CONTROL"): "kbench.text's control-character class, shared by the two core text modules",
    ("kbench.recommend.step", "_locate"): "kbench.recommend.price's lookup, within recommend",
    ("kbench.recommend.render", "_backends_of_setting"): "kbench.recommend.resolve's, within recommend",
    ("kbench.recommend.price", "_backends_of_setting"): "kbench.recommend.resolve's, within recommend",
    ("kbench.recommend.resolve", "_option"): "kbench.recommend.flags's, within recommend",
    ("kbench.timing.power", "_handle"): "kbench.timing.hardware's NVML handle, within timing",
    ("kbench.timing.power", "_nvml"): "kbench.timing.hardware's NVML module, within timing",
}
# modules whose private reads are of another library's objects, not of kbench's modules
ALLOWED_PRIVATE_MODULES = {"kbench.kernels.routes.sglang": "a FlashInfer wrapper's private state, set as SGLang's "
                                                           "own backend sets it (the route replays SGLang's code)"}


def private_uses() -> list[tuple[str, int, str]]:
    """(module, line, name) of each use of another module's private name: imported from a kbench module, or read as
    an attribute of anything but self/cls."""
    out = []
    for mod, path in modules().items():
        if mod in ALLOWED_PRIVATE_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kbench"):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name)
                                                          and node.value.id in ("self", "cls")):
                names = [node.attr]
            out += [(mod, node.lineno, n) for n in names
                    if n.startswith("_") and not n.startswith("__") and n not in PUBLIC_UNDERSCORE]
    return sorted(out)


if __name__ == "__main__":
    cyc, up, text = report()
    print(text)
    sys.exit(1 if cyc or up else 0)
