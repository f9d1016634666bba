"""PNG plots of a report (matplotlib, Agg backend, Figure objects: no pyplot global state).

- speedup heatmap, one file per group: decode/context speedup over batch x q_len, one panel per kv_len,
  every cell annotated (``=`` marks a decode/context tie, grey ``-`` a case without both paths); at most
  HEATMAP_MAX values per axis (a finer grid is drawn at representative values, and the figure says so);
- time against q_len per kernel for chosen (batch, kv_len): median with p25..p75 bars, log time, and the
  q_len x group = 16 / 32 lines where fa2 and the decode kernel step up;
- roofline (at most ROOFLINE_POINTS points): achieved KV bandwidth as a fraction of the run's measured read ceiling (manifest
  ``read_bandwidth_gbs``), against KV bytes; a run from before kbench measured one falls back to its copy
  bandwidth, and the plot says so.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.textpath import TextPath  # noqa: E402
from matplotlib.transforms import Affine2D  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from kbench.runs import atomic
from kbench.errors import BadInput  # noqa: E402
from kbench.cases.axes import AXIS, LATER_GROUP_AXES  # noqa: E402
from kbench.report.runs import GROUP_COLUMNS, group_label  # noqa: E402
from kbench.runs.store import safe_name  # noqa: E402
from kbench.runs.winners import TIE, WINNER_INPUT  # noqa: E402

DPI = 110
# What one heatmap figure draws at most, whatever the grid: kv_len panels, batch-size rows and q_len columns per
# panel. A grid with more distinct values on an axis is drawn at representative values (shown_values) and the
# figure says how many it leaves out (every case is in cases.csv): a fine KV sweep of 294 lengths drew 294 panels,
# about 80% of a 300,000-row report's time, and no reader looks at hundreds of panels.
HEATMAP_MAX = {"kv_len": 8, "batch_size": 32, "q_len": 32}
ROOFLINE_POINTS = 20_000  # points of the roofline scatter at most (a deterministic, evenly spread subset beyond)


def _groups(df: pd.DataFrame, only: set[tuple] | None = None):
    """(label, rows) per group in the report's group order; only: the group keys to draw (None: every group)."""
    for key, g in df.groupby(GROUP_COLUMNS, sort=True):
        if only is None or tuple(key) in only:
            yield group_label(dict(zip(GROUP_COLUMNS, key))), g


def plot_groups(cases: pd.DataFrame, limit: int | None) -> tuple[set[tuple] | None, int]:
    """The groups whose heatmap and time-vs-q_len plots are drawn, and how many groups there are.

    limit: at most this many (None or < 0: every group). Chosen first: groups with fewer realistic-batch axes
    and timing states off their default (the idealised batch first), then in the report's group order; the
    plots are drawn in the report's group order. A figure costs a second or two to draw, and a full grid over
    the realistic axes has a group per combination of their values."""
    keys = [tuple(k) for k in cases[GROUP_COLUMNS].drop_duplicates().sort_values(GROUP_COLUMNS).itertuples(index=False)]
    if limit is None or limit < 0 or len(keys) <= limit:
        return None, len(keys)
    off = [sum(g.get(a, AXIS[a].default) != AXIS[a].default for a in LATER_GROUP_AXES)
           for g in (dict(zip(GROUP_COLUMNS, k)) for k in keys)]
    return {keys[i] for i in sorted(range(len(keys)), key=lambda i: (off[i], i))[:limit]}, len(keys)


def _save(fig: Figure, path: Path) -> Path:
    """Every figure here is laid out by matplotlib's constrained layout, which fits it (bbox_inches="tight" drew it
    once more to measure it). PNG at zlib level 1: a tall heatmap (10 megapixels) compresses in two thirds of the
    time of level 6, for 8% more bytes."""
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=DPI, pil_kwargs={"compress_level": 1}))
    return path


class CellLabels(PathCollection):
    """The text of every cell of a heatmap panel as one artist: each label's outline (TextPath, made once per
    distinct text) centred on its cell. A Text per cell cost about a millisecond each to lay out and draw, three
    seconds for a figure of a 300,000-row run's 2,352 cells; one collection draws them in a few dozen
    milliseconds. ``texts``: the labels, in the order given. Left out of the layout's measuring (in_layout): the
    labels stay inside their axes."""

    def __init__(self, labels: list[tuple[float, float, str, str]], size_pt: float, ax):
        shapes: dict = {}
        prop = FontProperties(size=size_pt)
        for _, _, text, _ in labels:
            if text not in shapes:
                tp = TextPath((0, 0), text, prop=prop)
                (x0, y0), (x1, y1) = tp.vertices.min(axis=0), tp.vertices.max(axis=0)  # control points' box
                shapes[text] = tp.transformed(Affine2D().translate(-(x0 + x1) / 2, -(y0 + y1) / 2))
        self.texts = [t for _, _, t, _ in labels]
        super().__init__([shapes[t] for t in self.texts], offsets=[(x, y) for x, y, _, _ in labels] or None,
                         offset_transform=ax.transData, facecolors=[c for *_, c in labels], edgecolors="none",
                         linewidths=0, transform=Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans)  # points
        self.set_in_layout(False)


def shown_values(values, n: int) -> list:
    """At most n of the sorted distinct values, spread evenly by rank, the smallest and the largest always among
    them (a heatmap's representative kv_len panels, batch rows, q_len columns)."""
    values = sorted(values)
    if len(values) <= n:
        return values
    return [values[i] for i in sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})]


def heatmap_values(g: pd.DataFrame) -> tuple[dict[str, list], str]:
    """The values of each axis one group's heatmap draws (HEATMAP_MAX), and a note naming the axes it thinned
    ('' when it draws every value)."""
    shown, left = {}, []
    for axis, n in HEATMAP_MAX.items():
        every = g[axis].unique()
        shown[axis] = shown_values(every, n)
        if len(every) > len(shown[axis]):
            left.append(f"{axis} {len(shown[axis])} of {len(every)} values")
    note = (f"drawn at representative values ({', '.join(left)}, evenly spread, ends included); every case is in "
            f"cases.csv") if left else ""
    return shown, note


def speedup_heatmaps(cases: pd.DataFrame, out_dir: Path, only: set[tuple] | None = None,
                     notes: dict | None = None) -> list[Path]:
    """One figure per group; notes: filled with {path: what the figure leaves out} for a thinned grid."""
    out = []
    for label, g in _groups(cases, only):
        shown, note = heatmap_values(g)
        bss, kvs, qs = shown["batch_size"], shown["kv_len"], shown["q_len"]
        if note:
            g = g[g["batch_size"].isin(bss) & g["kv_len"].isin(kvs) & g["q_len"].isin(qs)]
        sp = g["decode_speedup"].astype(float)
        finite = np.log2(sp[sp > 0].to_numpy()) if (sp > 0).any() else np.array([0.0])
        lim = max(0.25, float(np.nanmax(np.abs(finite))))
        norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
        # one panel per kv_len, q_len along x: the crossover along q_len reads left to right in one panel
        # (a panel per q_len gave 16 panels of two cells for the committed baseline's single kv_len)
        ncols = min(len(kvs), 1 if len(qs) > 8 else 3)
        nrows = math.ceil(len(kvs) / ncols)
        cw, ch = max(3.2, 0.55 * len(qs) + 1.2), max(3.0, 0.42 * len(bss) + 1.2)
        fig = Figure(figsize=(cw * ncols + 1.6, ch * nrows + 0.8), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        font = 8 if len(qs) <= 16 else 6.5
        im = None
        for i, kv in enumerate(kvs):
            ax = axes[i // ncols][i % ncols]
            m = np.full((len(bss), len(qs)), np.nan)
            cell = g[g["kv_len"] == kv]
            labels = []  # (x, y, text, colour) of every cell
            for r in cell.itertuples():
                y, x = bss.index(r.batch_size), qs.index(r.q_len)
                s = r.decode_speedup
                if s is not None and not (isinstance(s, float) and math.isnan(s)) and s > 0:
                    m[y, x] = math.log2(s)
                    labels.append((x, y, f"{s:.2f}" + ("=" if r.path_verdict == TIE else ""),
                                   "white" if abs(m[y, x]) > 0.6 * lim else "black"))
                else:
                    labels.append((x, y, "-", "0.4"))
            ax.add_collection(CellLabels(labels, font, ax), autolim=False)
            ax.set_facecolor("0.85")
            im = ax.imshow(m, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
            ax.set_title(f"kv_len {kv}", fontsize=10)
            ax.set_xticks(range(len(qs)), [str(q) for q in qs], fontsize=7)
            ax.set_yticks(range(len(bss)), [str(b) for b in bss], fontsize=7)
            if i % ncols == 0:
                ax.set_ylabel("batch size")
            if i // ncols == nrows - 1 or i + ncols >= len(kvs):
                ax.set_xlabel("q_len (tokens per request)")
        for j in range(len(kvs), nrows * ncols):
            axes[j // ncols][j % ncols].set_visible(False)
        cb = fig.colorbar(im, ax=axes, shrink=0.9 if nrows > 1 else 1.0,
                          label="decode speedup\n(best context / best decode time)")
        # ticks at round speedups inside the range, at least 5 (a range of 0.8x..1.25x got a lone `1x`)
        ticks = np.log2([v for v in (0.125, 0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2, 4, 8)
                         if abs(math.log2(v)) <= lim + 1e-9])
        if len(ticks) < 5:
            ticks = np.linspace(-lim, lim, 5)
        cb.set_ticks(list(ticks), labels=[f"{2 ** t:.3g}x" for t in ticks])
        fig.suptitle(f"Decode vs context speedup, {label}   (blue: decode faster, red: context faster, "
                     f"'=' tie, '-' one path missing)" + (f"\n{note}" if note else ""), fontsize=11)
        out.append(_save(fig, out_dir / f"{safe_name('speedup-heatmap-' + label)}.png"))
        if note and notes is not None:
            notes[out[-1]] = note
    return out


def winner_changes(rows: pd.DataFrame) -> dict[tuple[int, int], tuple[int, int]]:
    """(batch, kv_len) -> (changes of the path verdict along q_len, changes of the fastest kernel along q_len),
    the verdict (decode | context | tie, kbench.runs.winners) first: a slice where every kernel ties has none."""
    from kbench.runs.winners import case_winners

    w = case_winners(rows)
    out = {}
    for (bs, kv), g in w.groupby(["batch_size", "kv_len"], sort=True):
        g = g.sort_values("q_len")
        v, k = g["path_verdict"].tolist(), g["winner"].tolist()
        out[(int(bs), int(kv))] = (sum(a != b for a, b in zip(v, v[1:])), sum(a != b for a, b in zip(k, k[1:])))
    return out


def default_points(rows: pd.DataFrame) -> list[tuple[int, int]]:
    """Where the answer changes: the (batch, kv_len) slice with the most changes of the winning path along
    q_len (then of the winning kernel; then the smaller batch and kv_len), and the runner-up slice when the
    winner changes there too. With no change anywhere: the middle (batch, kv_len) of the grid."""
    changes = winner_changes(rows)
    ranked = sorted(changes, key=lambda p: (-changes[p][0], -changes[p][1], p))
    if ranked and sum(changes[ranked[0]]):
        return [ranked[0]] + [p for p in ranked[1:2] if changes[p][0]]
    bss, kvs = sorted(rows["batch_size"].unique()), sorted(rows["kv_len"].unique())
    return [(int(bss[len(bss) // 2]), int(kvs[len(kvs) // 2]))]


# one marker per kernel (drawn largest first, hollow every other one) so that kernels whose times coincide,
# such as decode-wrapper under fa2-prefill, stay visible; solid lines for the decode path, dashed for context
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def time_vs_q(ok_rows: pd.DataFrame, points: list[tuple[int, int]] | None, out_dir: Path,
              only: set[tuple] | None = None) -> list[Path]:
    out, asked = [], points is not None
    hit = set(zip(ok_rows["batch_size"], ok_rows["kv_len"])) if asked else set()  # measured in some group
    read = {*GROUP_COLUMNS, *WINNER_INPUT}  # what is drawn and default_points reads: the groups copy only these
    for label, g in _groups(ok_rows[[c for c in ok_rows.columns if c in read]], only):
        group = int(g["num_qo_heads"].iloc[0]) // max(1, int(g["num_kv_heads"].iloc[0]))
        for bs, kv in (points if asked else default_points(g)):
            sel = g[(g["batch_size"] == bs) & (g["kv_len"] == kv)]
            if sel.empty:
                continue
            fig = Figure(figsize=(7.5, 4.6), layout="constrained")
            ax = fig.subplots()
            by_kernel = list(sel.sort_values("q_len").groupby("kernel", sort=True))
            for i, (kernel, k) in enumerate(by_kernel):
                q, med = k["q_len"].to_numpy(), k["median_us"].to_numpy(dtype=float)
                p25 = pd.to_numeric(k["p25_us"], errors="coerce").fillna(k["median_us"]).to_numpy(dtype=float)
                p75 = pd.to_numeric(k["p75_us"], errors="coerce").fillna(k["median_us"]).to_numpy(dtype=float)
                lo, hi = np.clip(med - p25, 0, None), np.clip(p75 - med, 0, None)
                style = "-" if k["path"].iloc[0] == "decode" else "--"
                bars = ax.errorbar(q, med, yerr=[lo, hi], fmt=MARKERS[i % len(MARKERS)] + style,
                                   ms=4 + 1.5 * (len(by_kernel) - 1 - i), capsize=2, lw=1.4, zorder=2 + i,
                                   label=f"{kernel} ({k['path'].iloc[0]})")
                if i % 2:
                    bars.lines[0].set_markerfacecolor("none")
            qmin, qmax = sel["q_len"].min(), sel["q_len"].max()
            is_mla = "attention" in g and (g["attention"] == "mla").all()  # the steps are GQA kernels' (kernels.md)
            steps = [] if is_mla else [(qg / group, f"q·G={qg}\n{what}") for qg, what in
                                       ((16, "fa2 step"), (32, "decode step")) if qmin < qg / group <= qmax]
            for x, _ in steps:
                ax.axvline(x, color="0.5", ls=":", lw=1)
            if steps:  # labelled above the plot area, where no line runs
                top = ax.secondary_xaxis("top")
                top.set_xticks([x for x, _ in steps], [t for _, t in steps], fontsize=7, color="0.3")
                top.tick_params(length=0)
            ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="both", labelsize=7)  # decade and in-between ticks alike
            ax.set_xlabel(f"q_len (tokens per request; MLA: {group} q heads over one latent KV head)" if is_mla
                          else f"q_len (tokens per request; GQA group G = {group})")
            ax.set_ylabel("median time per call (µs, log)")
            ax.set_xticks(sorted(sel["q_len"].unique()))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            ax.set_title(f"Time vs q_len, batch {bs}, kv_len {kv}, {label}\n(solid: decode path, dashed: "
                         f"context path, one marker per kernel, bars: p25..p75)", fontsize=10)
            out.append(_save(fig, out_dir / f"{safe_name(f'time-vs-q-bs{bs}-kv{kv}-{label}')}.png"))
    if asked and (missing := [p for p in points if p not in hit]):
        bs, kv = missing[0]
        raise BadInput(f"--plot-batch {bs} --plot-kv {kv}: not measured (batch sizes "
                       f"{sorted(ok_rows['batch_size'].unique().tolist())}, kv_len {sorted(ok_rows['kv_len'].unique().tolist())})")
    return out


def roofline_fraction(ok_rows: pd.DataFrame, copy_bw_gbs: float | None) -> pd.Series:
    """roofline_frac as recorded, else KV bandwidth / copy bandwidth, else KV bytes / time / copy bandwidth."""
    frac = pd.to_numeric(ok_rows.get("roofline_frac"), errors="coerce") if "roofline_frac" in ok_rows else \
        pd.Series(np.nan, index=ok_rows.index)
    if copy_bw_gbs:
        bw = pd.to_numeric(ok_rows["kv_bandwidth_gbs"], errors="coerce")
        nbytes = pd.to_numeric(ok_rows["kv_bytes"], errors="coerce")
        derived = (nbytes / (ok_rows["median_us"] * 1e-6) / 1e9).where(nbytes > 0)
        frac = frac.fillna(bw / copy_bw_gbs).fillna(derived / copy_bw_gbs)
    return frac


def roofline(ok_rows: pd.DataFrame, copy_bw_gbs: float | None, out_dir: Path, ceiling: str = "copy") -> Path | None:
    """ceiling: "read" (the fastest read-only probe, what these read-mostly kernels can reach) or "copy" (runs from
    before the read figure: a copy counts bytes read and written, so a kernel that mostly reads can pass 1.0)."""
    frac = roofline_fraction(ok_rows, copy_bw_gbs)
    nbytes = pd.to_numeric(ok_rows["kv_bytes"], errors="coerce")
    keep = frac.notna() & (nbytes > 0)
    if not keep.any():
        return None
    d = ok_rows[keep].assign(frac=frac[keep], mb=nbytes[keep] / 1e6)
    total = len(d)
    if total > ROOFLINE_POINTS:  # every k-th row in (kernel, bytes) order: each kernel's whole range, evenly
        d = d.sort_values(["kernel", "mb"], kind="stable").iloc[:: -(-total // ROOFLINE_POINTS)]
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.subplots()
    markers = "os^vDP*X"
    for i, (kernel, k) in enumerate(d.groupby("kernel", sort=True)):
        ax.scatter(k["mb"], k["frac"], s=14, alpha=0.75, marker=markers[i % len(markers)],
                   label=f"{kernel} ({k['path'].iloc[0]})")
    ax.axhline(1.0, color="0.3", ls="--", lw=1)
    bw = f"{copy_bw_gbs:,.0f} GB/s" if copy_bw_gbs else "as recorded in the rows"
    name = "measured read ceiling" if ceiling == "read" else "copy bandwidth"
    ax.text(d["mb"].min(), 1.01, f"{name} ({bw})", fontsize=8, va="bottom")
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    xs = sorted(d["mb"].round(1).unique())
    if len(xs) <= 8:  # few sizes: tick each one, in plain MB (not 3x10^2)
        ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, max(1.15, float(d["frac"].max()) * 1.05))
    ax.set_xlabel("KV bytes read per call (MB, log)" + (f"; {len(d):,} of {total:,} measurements drawn, evenly "
                                                         f"spread per kernel" if len(d) < total else ""))
    ax.set_ylabel(f"achieved KV bandwidth / {name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"Read roofline: KV read rate / the measured read ceiling ({bw}, read_bandwidth_gbs)"
                 if ceiling == "read" else
                 f"No read ceiling in this run (measured before kbench had one): KV read rate / copy bandwidth "
                 f"({bw}; read + write bytes/s, so a read-mostly kernel may pass 1.0)", fontsize=9, wrap=True)
    return _save(fig, out_dir / "roofline.png")
