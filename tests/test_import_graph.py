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
