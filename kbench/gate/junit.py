"""JUnit XML: one test case per compared row (CI test-report UIs show them), one per winner comparison. Always
well-formed: a control character or NUL in a kernel name or case id is written as an escape (kbench.text.xml)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from kbench import text
from kbench.runs import atomic
from kbench.gate.compare import GateResult
from kbench.gate.markdown import fmt_change, fmt_value


def to_junit(res: GateResult) -> ET.ElementTree:
    root = ET.Element("testsuites", name=f"kbench gate: {res.summary_line()}")
    suite = ET.SubElement(root, "testsuite", name="kbench-gate.rows")
    fails = skips = 0
    for r in res.rows:
        classname = f"kbench.gate.{r.kernel}" if r.kernel else f"kbench.gate.{res.kind}"
        name = r.case_id + (f" [{r.metric}]" if r.metric and r.metric != "median_us" else "")
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
        detail = (f"baseline {fmt_value(r.base_value)}, candidate {fmt_value(r.cand_value)}, "
                  f"change {fmt_change(r)}; {r.note}")
        if r.fails:
            fails += 1
            ET.SubElement(tc, "failure", type=r.outcome, message=f"{r.outcome}: {r.note}").text = detail
        elif r.outcome == "inconclusive":  # a CI test report shows it, and the suite says the verdict
            skips += 1
            ET.SubElement(tc, "skipped", type="inconclusive", message=f"inconclusive: {r.note}")
        elif r.outcome in ("not-compared", "new", "missing", "skipped"):
            skips += 1
            ET.SubElement(tc, "skipped", message=f"{r.outcome}: {r.note}")
        else:
            ET.SubElement(tc, "system-out").text = f"{r.outcome}: {detail}"
    suite.set("tests", str(len(res.rows)))
    suite.set("failures", str(fails))
    suite.set("skipped", str(skips))
    suite.set("errors", "0")

    wsuite = ET.SubElement(root, "testsuite", name="kbench-gate.winners")
    changed = {w.case_id: w for w in res.winner_changes}
    wfails = 0
    for case_id in res.winners_compared:
        tc = ET.SubElement(wsuite, "testcase", classname="kbench.gate.winner", name=case_id, time="0")
        w = changed.get(case_id)
        if w is None:
            continue
        msg = f"winner changed from {w.base_path} ({w.base_winner}) to {w.cand_path} ({w.cand_winner})"
        if w.fails:
            wfails += 1
            ET.SubElement(tc, "failure", type="winner-change", message=msg).text = msg
        else:
            ET.SubElement(tc, "system-out").text = msg + " (allowed by --ignore-winner-change)"
    wsuite.set("tests", str(len(res.winners_compared)))
    wsuite.set("failures", str(wfails))
    wsuite.set("errors", "0")
    root.set("tests", str(len(res.rows) + len(res.winners_compared)))
    root.set("failures", str(fails + wfails))
    for el in root.iter():  # every name, message and text an input brought: XML a CI reader takes (kbench.text.xml)
        el.text = None if el.text is None else text.xml(el.text)
        for k, v in el.attrib.items():
            el.set(k, text.xml(v))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(res: GateResult, path: str | Path) -> None:
    tree = to_junit(res)
    atomic.write_with(path, lambda tmp: tree.write(tmp, encoding="utf-8", xml_declaration=True), named=True)
