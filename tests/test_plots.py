"""The report's plots, as a reader meets them: the speed-up heatmap (one panel per kv_len, a colour bar with a
scale), time vs q (the slice where the winner changes, a marker per kernel, steps labelled above) and the roofline
that says its ceiling."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BASELINE, run_cli

from kbench.runs.store import load_run


def test_heatmap_colorbar_has_a_scale_and_roofline_says_its_ceiling(tmp_path, monkeypatch):
    from kbench.report import plots
    from kbench.report.build import build_report

    figs = {}
    real = plots._save

    def keep(fig, path, **kw):
        figs[Path(path).name] = fig
        return real(fig, path, **kw)

    monkeypatch.setattr(plots, "_save", keep)
    build_report([BASELINE], tmp_path / "rep")
    heat = next(f for n, f in figs.items() if n.startswith("speedup-heatmap"))
    cbar = heat.axes[-1]
    labels = [t.get_text() for t in cbar.get_yticklabels() if t.get_text()]
    assert len(labels) >= 5 and "1x" in labels, labels
    roof = figs["roofline.png"].axes[0]
    assert "copy bandwidth" in roof.get_ylabel() and "may pass 1.0" in roof.get_title()
    assert [t.get_text() for t in roof.get_xticklabels()] == ["268", "1,074"]


def test_heatmap_is_one_panel_per_kv_len_with_q_len_along_x(tmp_path, monkeypatch):
    """The committed baseline has one kv_len: one panel of 2 x 16 cells (was 16 panels of two cells)."""
    from kbench.report import plots
    from kbench.runs.winners import case_winners

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.append(fig) or path)
    plots.speedup_heatmaps(case_winners(load_run(BASELINE).rows), tmp_path)
    (fig,) = figs
    panels = [a for a in fig.axes if a.get_images()]
    assert len(panels) == 1
    (ax,) = panels
    assert ax.get_title() == "kv_len 4096" and ax.get_xlabel().startswith("q_len")
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(q) for q in range(1, 17)]
    (labels,) = [c for c in ax.collections if isinstance(c, plots.CellLabels)]  # every cell annotated, one artist
    assert len(labels.texts) == len(labels.get_paths()) == len(labels.get_offsets()) == 32
    assert all(t == "-" or float(t.rstrip("=")) > 0 for t in labels.texts), labels.texts


def test_time_vs_q_defaults_to_the_slice_where_the_winner_changes(tmp_path):
    from kbench.report.plots import default_points, winner_changes

    ok = load_run(BASELINE).rows
    ok = ok[ok["status"] == "ok"]
    changes = winner_changes(ok)
    assert changes[(64, 4096)][0] == 0 < changes[(16, 4096)][0]  # bs 64: every kernel ties; bs 16: decode wins q 1-8
    assert default_points(ok) == [(16, 4096)]
    r = run_cli(["report", BASELINE, "--out", tmp_path / "rep"])
    assert r.exit_code == 0, r.output
    assert [p.name.split("-32")[0] for p in (tmp_path / "rep").glob("time-vs-q-*.png")] == ["time-vs-q-bs16-kv4096"]


def test_time_vs_q_gives_each_kernel_its_own_marker_and_labels_steps_above_the_plot(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from kbench.report import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.append(fig) or path)
    ok = load_run(BASELINE).rows
    plots.time_vs_q(ok[ok["status"] == "ok"], [(16, 4096)], tmp_path)
    (fig,) = figs
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    markers = {c.get_label(): c.lines[0].get_marker() for c in ax.containers}  # one errorbar per kernel
    assert len(set(markers.values())) == len(markers) >= 5, markers
    assert markers["decode-wrapper (decode)"] != markers["fa2-prefill (context)"]
    assert not [t for t in ax.texts if "q·G" in t.get_text()]  # no label inside the plot area
    top = ax.child_axes  # the secondary x axis on top
    assert top and any("q·G=16" in t.get_text() for a in top for t in a.get_xticklabels())


def test_roofline_of_a_run_with_a_read_ceiling_is_the_read_roofline_and_names_it(tmp_path, monkeypatch):
    """A run that measured its read ceiling (manifest read_bandwidth_gbs) is plotted against it, and the plot
    names the ceiling and its figure; no kernel passes 1.0 there (the copy-bandwidth fallback is for older runs)."""
    import json

    from kbench.report import plots
    from kbench.report.build import build_report

    run = BASELINE.parent / "h200-power-both-kv4096-sweep1"
    read = json.loads((run / "manifest.json").read_text())["read_bandwidth_gbs"]
    figs = {}
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.setdefault(Path(path).name, fig) and real(fig, path, **kw))
    rep = build_report([run], tmp_path / "rep", plot_groups=0, power="unthrottled")
    roof = figs["roofline.png"].axes[0]
    assert roof.get_ylabel() == "achieved KV bandwidth / measured read ceiling"
    assert f"{read:,.0f} GB/s" in roof.get_title() and "read_bandwidth_gbs" in roof.get_title()
    assert any(t.get_text() == f"measured read ceiling ({read:,.0f} GB/s)" for t in roof.texts)
    assert max(max(c.get_offsets()[:, 1]) for c in roof.collections) <= 1.0
    caption = dict((p.name, c) for p, c in rep.plots)["roofline.png"]
    assert caption == f"Fraction of the read roofline per kernel (the measured read ceiling, {read:,.0f} GB/s)"


def _fine_grid_rows(bss, kvs, qs):
    from report_synth import DECODE, FA2, case, row

    rows = []
    for bs in bss:
        for kv in kvs:
            for q in qs:
                c = case(bs, q, kv)
                rows += [row(DECODE, c, 10.0 + q + kv / 1000), row(FA2, c, 12.0 + bs / 10 + kv / 2000)]
    return rows



@pytest.mark.parametrize("shape,bss,kvs,qs", [
    ("hundreds of KV lengths", (1, 16), [512 + 112 * i for i in range(150)], (1, 4)),
    ("hundreds of batch sizes", range(1, 151), (4096,), (1, 8)),
    ("many q_len values", (16,), (4096,), range(1, 61)),
    ("few values, every one drawn", (1, 16), (512, 4096), range(1, 9)),
])
def test_a_heatmap_is_bounded_whatever_the_grid_shape(shape, bss, kvs, qs, tmp_path, monkeypatch):
    """What a report draws must not grow with the number of distinct values on an axis: at most HEATMAP_MAX values
    per axis (panels, rows, columns), the smallest and largest among them, and the figure and the report's caption
    say how many were left out; a grid within the limits is drawn whole, with no such note."""
    from report_synth import write_run

    from kbench.report import plots
    from kbench.report.build import build_report

    figs = {}
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.setdefault(Path(path).name, fig) and
                        real(fig, path, **kw))
    run = write_run(tmp_path / "run", _fine_grid_rows(bss, kvs, qs))
    rep = build_report(run, tmp_path / "rep")
    (heat,) = [f for n, f in figs.items() if n.startswith("speedup-heatmap")]
    panels = [a for a in heat.axes if a.get_images()]
    limit = plots.HEATMAP_MAX
    kv_drawn = [int(a.get_title().split()[-1]) for a in panels]
    assert len(panels) == min(len(kvs), limit["kv_len"]) and kv_drawn[0] == min(kvs) and kv_drawn[-1] == max(kvs)
    for ax in panels:
        ys = [int(t.get_text()) for t in ax.get_yticklabels()]
        xs = [int(t.get_text()) for t in ax.get_xticklabels()]
        assert len(ys) == min(len(bss), limit["batch_size"]) and ys[0] == min(bss) and ys[-1] == max(bss)
        assert len(xs) == min(len(qs), limit["q_len"]) and xs[0] == min(qs) and xs[-1] == max(qs)
    (caption,) = [c for p, c in rep.plots if p.name.startswith("speedup-heatmap")]
    thinned = {a: n for a, n in (("kv_len", len(kvs)), ("batch_size", len(set(bss))), ("q_len", len(set(qs))))
               if n > limit[a]}
    for axis, n in thinned.items():
        assert f"{axis} {limit[axis]} of {n} values" in caption and f"{axis} {limit[axis]} of {n}" in heat._suptitle.get_text()
    assert ("every case is in cases.csv" in caption) == bool(thinned)
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "rep" / "cases.csv")) == len(set(bss)) * len(kvs) * len(set(qs))  # every case


def test_the_roofline_draws_at_most_its_cap_spread_over_each_kernel(tmp_path, monkeypatch):
    import pandas as pd

    from kbench.report import plots

    monkeypatch.setattr(plots, "ROOFLINE_POINTS", 100)
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.append(fig) or path)
    n = 1000
    ok = pd.DataFrame({"kernel": ["a", "b"] * (n // 2), "path": ["decode", "context"] * (n // 2),
                       "kv_bytes": [1e6 * (1 + i) for i in range(n)], "median_us": [10.0] * n,
                       "kv_bandwidth_gbs": [100.0] * n, "roofline_frac": [0.5] * n})
    plots.roofline(ok, 4000.0, tmp_path, "read")
    ax = figs[0].axes[0]
    drawn = [c.get_offsets() for c in ax.collections]
    assert sum(len(d) for d in drawn) <= 100 and len(drawn) == 2  # both kernels, each over its range
    assert all(d[:, 0].min() < 10 and d[:, 0].max() > 900 for d in drawn)
    assert "of 1,000 measurements drawn" in ax.get_xlabel()
