"""The recommendation against the engine: a server-bench A/B of two settings (the gate's answer on the two runs)
beside what recommend predicts for the same batches.

The CLI runs the gate on the two server-bench runs (kbench.gate, a peer layer) and hands this module plain
numbers per case: A's and B's latency and the gate's verdict. The prediction prices both settings on the
workload the A run wrote (RUN/workload.jsonl: per case, the decoding steps of one batch), so per case it is the
attention time of one batch under A and under B, with the step weights and layer counts given; the difference
is what switching A -> B should change in a batch's latency, if attention were all that changed.
"""
from __future__ import annotations

from dataclasses import dataclass

from kbench.errors import BadInput
from kbench.recommend.price import Source, recommend
from kbench.recommend.settings import Engine
from kbench.recommend.workload import Workload
from kbench import text
from kbench.report.markdown import table as md_table


@dataclass
class Measured:
    case: str
    latency_a_s: float | None
    latency_b_s: float | None
    outcome: str  # the gate's: improvement | regression | within-noise | pass | ...


@dataclass
class CaseCheck:
    case: str
    measured: Measured | None
    attention_a_us: float  # predicted attention time of one batch of the case under A
    attention_b_us: float

    @property
    def predicted_saving_ms(self) -> float:  # > 0: B faster
        return (self.attention_a_us - self.attention_b_us) / 1000

    @property
    def predicted_pct_of_latency(self) -> float | None:
        m = self.measured
        if m is None or not m.latency_a_s:
            return None
        return self.predicted_saving_ms / (m.latency_a_s * 1000) * 100

    @property
    def measured_saving_ms(self) -> float | None:
        m = self.measured
        if m is None or m.latency_a_s is None or m.latency_b_s is None:
            return None
        return (m.latency_a_s - m.latency_b_s) * 1000

    def agrees(self, threshold_pct: float) -> str:
        """yes / no / - : the measured verdict against the predicted direction (within the threshold: no change)."""
        p = self.predicted_pct_of_latency
        if p is None or self.measured is None:
            return "-"
        want = "faster" if p > threshold_pct else "slower" if p < -threshold_pct else "same"
        got = {"improvement": "faster", "regression": "slower"}.get(self.measured.outcome, "same")
        return "yes" if want == got else "no"


@dataclass
class Check:
    setting_a: str
    setting_b: str
    cases: list[CaseCheck]
    answer: str  # the gate's A/B sentence
    threshold_pct: float
    layers: dict[str, int]


def check_ab(source: Source, workload: Workload, engine: Engine, setting_a: str, setting_b: str,
             measured: list[Measured], answer: str, threshold_pct: float = 5.0, **kw) -> Check:
    """Per server-bench case of the workload, the attention time of one batch under A and under B."""
    by_case: dict[str, list] = {}
    for b in workload.batches:
        if b.case is None:
            raise BadInput(f"{workload.source}: {b.label} names no server-bench case (the A/B check needs the "
                           "workload.jsonl kbench server-bench wrote)")
        by_case.setdefault(b.case, []).append(b)
    meas = {m.case: m for m in measured}
    missing = sorted(set(meas) - set(by_case))
    if missing:
        raise BadInput(f"{workload.source}: no batches for the measured case(s) {', '.join(missing[:3])}: use the "
                       "workload.jsonl of the A run")
    out = []
    for case, batches in sorted(by_case.items()):
        sub = Workload(batches, f"{workload.source} ({case})", workload.header)
        rec = recommend(source, sub, engine, settings=list(dict.fromkeys([setting_a, setting_b])), **kw)
        tot = {r.setting.id: r.total_us for r in rec.results}
        for ident in (setting_a, setting_b):
            if tot.get(ident) is None:
                why = next(r.unpriced for r in rec.results if r.setting.id == ident)
                raise BadInput(f"--ab-settings: {ident} cannot be priced ({why})")
        out.append(CaseCheck(case, meas.get(case), tot[setting_a], tot[setting_b]))
    return Check(setting_a, setting_b, out, answer, threshold_pct, rec.layers)


def check_rows(chk: Check) -> tuple[list[str], list[list[str]]]:
    headers = ["case", "latency A -> B (measured)", "gate", "attention A -> B (predicted, per batch)",
               "predicted change", "agrees"]
    rows = []
    for c in chk.cases:
        m = c.measured
        lat = (f"{m.latency_a_s * 1000:,.1f} -> {m.latency_b_s * 1000:,.1f} ms"
               if m and m.latency_a_s is not None and m.latency_b_s is not None else "not measured")
        pct = c.predicted_pct_of_latency
        rows.append([c.case, lat, m.outcome if m else "-",
                     f"{c.attention_a_us / 1000:,.3f} -> {c.attention_b_us / 1000:,.3f} ms",
                     (f"B saves {c.predicted_saving_ms:,.3f} ms" if c.predicted_saving_ms >= 0
                      else f"B costs {-c.predicted_saving_ms:,.3f} ms") + (f" ({abs(pct):.2f}% of A's latency)"
                                                                         if pct is not None else ""),
                     c.agrees(chk.threshold_pct)])
    return headers, rows


def check_markdown(chk: Check) -> str:
    headers, rows = check_rows(chk)
    lines = [f"### Check against the engine: A = {text.code(chk.setting_a)}, B = {text.code(chk.setting_b)}", "",
             f"**Measured (kbench gate on the two server-bench runs):** {text.markdown(chk.answer)}", "",
             *md_table(headers, rows)]
    agree = [c.agrees(chk.threshold_pct) for c in chk.cases]
    judged = [a for a in agree if a != "-"]
    lines += ["", f"Predicted from kernel times: attention only (verify x {chk.layers['verify']} layers, draft extend "
              f"x {chk.layers['draft_extend']}), the steps of one batch per case; a predicted change within "
              f"{chk.threshold_pct:g}% of A's latency counts as no change. "
              f"{judged.count('yes')} of {len(judged)} measured case(s) agree in direction."]
    return "\n".join(lines) + "\n"


def check_ab_runs(run_a, run_b, engine: str) -> None:
    """The two runs of `recommend --ab`: two different server-bench runs, both of the engine asked about (an A/B
    compares two settings of one engine); BadInput otherwise. The gate reads them after this."""
    import os

    from kbench.runs.store import check_run_folder, load_run

    pa, pb = check_run_folder(run_a), check_run_folder(run_b)
    if os.path.realpath(pa) == os.path.realpath(pb):
        raise BadInput(f"--ab {run_a} {run_b}: one run given as both A and B; give the server-bench run of setting "
                       "A, then the one of setting B")
    for role, p in (("A", pa), ("B", pb)):
        run = load_run(p, lists=False)
        if run.kind != "server-bench":
            raise BadInput(f"--ab {run_a} {run_b}: two kbench server-bench runs, not {run.kind} runs")
        backends = sorted({str(b) for b in run.rows.get("backend", []) if isinstance(b, str) and b})
        if backends != [engine]:
            raise BadInput(f"--ab: run {role} ({p}) measured {', '.join(backends) or 'no backend'}, not --engine "
                           f"{engine}: an A/B compares two settings of the engine asked about")
