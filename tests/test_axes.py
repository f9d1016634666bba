"""The one table of case axes: what derives from it, case ids that stay put, old runs that keep loading."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.cli.sweep_cmd import sweep
from kbench.errors import BadInput
from kbench.runs.rows import COLUMNS
from kbench.cases.scenario import Scenario, scenario_from_dict
from kbench.runs.store import load_run, normalize

BASELINE = Path(__file__).resolve().parents[1] / "results" / "baselines" / "h200-draft-extend-kv4096"


def test_case_ids_of_the_committed_baseline_are_rebuilt_identically():
    rows = load_run(BASELINE).rows
    for r in rows.to_dict("records"):
        case = Case(**{a.name: a.type(r[a.name]) for a in axes.AXES})
        assert case.case_id == r["case_id"]
    assert len(rows) > 100


def test_every_axis_is_a_case_field_and_a_row_column_in_table_order():
    names = [a.name for a in axes.AXES]
    assert Case.field_names() == names
    i = COLUMNS.index("case_id")
    assert COLUMNS[i + 1:i + 1 + len(names)] == names


def test_every_grid_axis_is_a_scenario_key_and_a_sweep_flag():
    flags = {o for p in sweep.params for o in p.opts}
    for a in axes.axes_with(axes.GRID):
        assert a.flag in flags
        assert a.name in Scenario.__dataclass_fields__


def test_an_axis_at_its_sentinel_default_leaves_the_case_id_alone():
    window = axes.Axis("window_left", int, -1, "sliding window", frozenset({axes.GRID}))
    assert window.id_text(SimpleNamespace(window_left=-1)) is None
    assert window.id_text(SimpleNamespace(window_left=128)) == "window_left=128"
    tagged = axes.Axis("window_left", int, -1, "", id_part=lambda c: None if c.window_left < 0 else f"w{c.window_left}")
    assert tagged.id_text(SimpleNamespace(window_left=64)) == "w64"


def test_a_spec_axis_checks_each_item_with_its_parser():
    def dist(item: str) -> str:
        kind, _, arg = item.partition(":")
        if kind != "lognormal" or not arg:
            raise ValueError(f"{item!r} is not lognormal:SIGMA")
        return f"lognormal:{float(arg)}"

    a = axes.Axis("kv_dist", str, "fixed", "", spec=dist)
    assert a.parse("lognormal:1, lognormal:0.5", "grid.kv_dist", "x.toml") == ["lognormal:1.0", "lognormal:0.5"]
    with pytest.raises(BadInput, match=r"x.toml: grid.kv_dist: 'zipf' is not lognormal:SIGMA"):
        a.parse("zipf", "grid.kv_dist", "x.toml")


def test_a_column_an_old_run_lacks_reads_as_the_axis_default():
    rows = load_run(BASELINE).rows.drop(columns=["kv_layout", "page_size"])
    back = normalize(rows)
    assert set(back["kv_layout"]) == {"HND"} and set(back["page_size"]) == {64}


def test_grid_value_errors_name_the_axis_and_the_allowed_values():
    base = {"model": "llama3-8b", "grid": {"batch_size": 1, "q_len": 1, "kv_len": 64}}
    with pytest.raises(BadInput, match=r"grid.page_size: 48 is taken by no kernel \(use one of 1, 16, 32, 64, 128\)"):
        scenario_from_dict({**base, "grid": {**base["grid"], "page_size": 48}}, "s.toml")
    with pytest.raises(BadInput, match=r"grid.q_len: 65 is beyond draft-extend shapes"):
        scenario_from_dict({**base, "grid": {**base["grid"], "q_len": 65, "kv_len": 128}}, "s.toml")
    sc = scenario_from_dict({**base, "grid": {**base["grid"], "dtype": "fp16,bf16"}}, "s.toml")
    assert [c.kv_dtype for c in sc.cases()] == ["fp16", "bf16"]  # kv_dtype follows dtype when not given


def test_group_label_shows_a_later_axis_only_off_its_default(monkeypatch):
    g = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "bf16", "kv_dtype": "fp8",
         "page_size": 64, "kv_layout": "HND"}
    assert axes.group_label(g) == "32/8/128 bf16-kvfp8 p64 HND"
    extra = axes.Axis("sinks", str, "off", "", frozenset({axes.GROUP}))
    monkeypatch.setattr(axes, "AXIS", {**axes.AXIS, "sinks": extra})
    monkeypatch.setattr(axes, "LATER_GROUP_AXES", ["sinks"])
    assert axes.group_label({**g, "sinks": "off"}) == "32/8/128 bf16-kvfp8 p64 HND"
    assert axes.group_label({**g, "sinks": "on"}) == "32/8/128 bf16-kvfp8 p64 HND sinks=on"
