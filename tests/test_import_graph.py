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
