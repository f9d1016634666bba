"""What is measured: the case axes (one table), the Case, per-request lengths, model head presets, scenarios.

Imports only the timing settings and core below it (tests/import_graph.py checks the layers).
"""
