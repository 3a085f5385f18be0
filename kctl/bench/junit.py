"""JUnit XML for CI test reports: one test case per (cell, gated metric).

The layout is the one Jenkins, GitLab and GitHub's test reporters read: ``<testsuites>``
holding one ``<testsuite name="kctl.bench">``; a regressed check is a ``<failure>``
whose message gives the numbers; a cell missing from the baseline is ``<skipped>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from kctl.bench.gate import Check, GateResult

__all__ = ["write_junit"]


def _describe(c: Check) -> str:
    return (f"{c.metric}: median {c.current.median:.4g} (min {c.current.min:.4g}, max {c.current.max:.4g}) "
            f"vs baseline {c.baseline.median:.4g} (min {c.baseline.min:.4g}, max {c.baseline.max:.4g}); "
            f"change {c.change_pct:+.1f}%, allowed {c.allowed_pct:.1f}% "
            f"(bound {c.bound.text()} plus the repetitions' spread)")


def write_junit(result: GateResult, path: str | Path, *, elapsed_s: float = 0.0) -> None:
    suites = ET.Element("testsuites")
    cases = []
    for c in result.checks:
        case = ET.Element("testcase", classname=f"kctl.bench.{c.cell}", name=c.metric, time="0")
        if c.regressed:
            f = ET.SubElement(case, "failure", message=f"{c.cell}: {c.metric} regressed "
                              f"{c.change_pct:+.1f}% (allowed {c.allowed_pct:.1f}%)", type="regression")
            f.text = _describe(c)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = _describe(c)
        cases.append(case)
    for name in result.missing_in_baseline:
        case = ET.Element("testcase", classname=f"kctl.bench.{name}", name="baseline", time="0")
        ET.SubElement(case, "skipped", message="cell not in the baseline")
        cases.append(case)
    failures = len(result.regressions)
    if not result.checks:       # a gate that checked nothing fails (gate.py)
        case = ET.Element("testcase", classname="kctl.bench.gate", name="cells in common", time="0")
        ET.SubElement(case, "failure", type="nothing-checked",
                      message="no cell and bounded metric in common with the baseline: nothing checked")
        cases.append(case)
        failures += 1
    suite = ET.SubElement(suites, "testsuite", name="kctl.bench", tests=str(len(cases)),
                          failures=str(failures), errors="0",
                          skipped=str(len(result.missing_in_baseline)), time=f"{elapsed_s:.3f}")
    suite.extend(cases)
    tree = ET.ElementTree(suites)
    ET.indent(tree)
    tree.write(str(path), encoding="utf-8", xml_declaration=True)
