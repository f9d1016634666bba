"""The import graph has no cycle and no upward import (cli -> engine -> kernels -> core); see import_graph.py."""

import import_graph


def test_no_cycle_and_no_upward_import():
    cyc, up, text = import_graph.report()
    assert not cyc and not up, text


def test_the_check_sees_a_lazy_cycle_and_an_upward_import():
    edges = {"kbench.engine.sweep": {"kbench.engine.isolation"}, "kbench.engine.isolation": {"kbench.engine.sweep"},
             "kbench.kernels.inputs": {"kbench.runs.store"}, "kbench.runs.store": set()}
    assert import_graph.cycles(edges) == [["kbench.engine.isolation", "kbench.engine.sweep"]]
    assert import_graph.upward(edges) == [("kbench.kernels.inputs", "kbench.runs.store")]
    assert len(import_graph.graph()) > 50  # every module of kbench, kbench.cli and kbench.kernels was read


def test_no_module_uses_another_modules_private_name(tmp_path, monkeypatch):
    """The seams are public names (import_graph.ALLOWED_PRIVATE lists the known exceptions with their reason);
    the check sees an imported private function and a private method called on another object."""
    got = {(m, n) for m, _, n in import_graph.private_uses()}
    assert got <= set(import_graph.ALLOWED_PRIVATE), sorted(got - set(import_graph.ALLOWED_PRIVATE))
    assert set(import_graph.ALLOWED_PRIVATE) <= got, "listed but no longer used: drop it from ALLOWED_PRIVATE"
    (tmp_path / "kbench" / "gate").mkdir(parents=True)
    for f in ("kbench/__init__.py", "kbench/gate/__init__.py"):
        (tmp_path / f).write_text("")
    (tmp_path / "kbench" / "gate" / "seq.py").write_text(
        "from kbench.gate.compare import _compare_metric\n\ndef f(runner):\n    return runner._row(), self._ok()\n")
    monkeypatch.setattr(import_graph, "FOLDERS", {"kbench": tmp_path / "kbench"})
    assert [n for _, _, n in import_graph.private_uses()] == ["_compare_metric", "_row"]


def test_every_python_api_named_in_the_docs_imports():
    """The 'from Python, without the CLI' lines of kbench/__init__.py, the README and docs/ name importable things."""
    import importlib
    import re
    from pathlib import Path

    import kbench

    root = Path(__file__).resolve().parents[1]
    docs = "".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    lines = re.findall(r"^\s*from (kbench[\w.]*) import ([\w, ]+)", kbench.__doc__ + docs, re.M)
    assert len(lines) >= 15, lines
    for mod, names in lines:
        m = importlib.import_module(mod)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(m, name), f"from {mod} import {name}"


def test_a_protocol_in_a_package_init_that_imports_its_implementations_is_a_cycle(tmp_path, monkeypatch):
    """An implementation taking the protocol from its package's __init__, which imports the implementation (lazily,
    inside a function), is a cycle; so is one whose other import names a submodule of the package."""
    pkg = tmp_path / "kbench" / "engine" / "plans"
    pkg.mkdir(parents=True)
    (tmp_path / "kbench" / "__init__.py").write_text("")
    (tmp_path / "kbench" / "engine" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("class Plan: ...\n\ndef plan_for():\n    from kbench.engine.plans.grid import Grid\n"
                                     "    return Grid()\n")
    (pkg / "helpers.py").write_text("X = 1\n")
    (pkg / "grid.py").write_text("from kbench.engine.plans import Plan\nfrom kbench.engine.plans.helpers import X\n\n"
                                 "class Grid(Plan): ...\n")
    monkeypatch.setattr(import_graph, "FOLDERS", {"kbench": tmp_path / "kbench"})
    assert ["kbench.engine.plans", "kbench.engine.plans.grid"] in import_graph.report()[0]
    (pkg / "base.py").write_text("class Plan: ...\n")  # the protocol in a module of its own: no cycle
    (pkg / "grid.py").write_text("from kbench.engine.plans.base import Plan\n\nclass Grid(Plan): ...\n")
    (pkg / "__init__.py").write_text("from kbench.engine.plans.base import Plan\n\ndef plan_for():\n"
                                     "    from kbench.engine.plans.grid import Grid\n    return Grid()\n")
    assert import_graph.report()[0] == []
