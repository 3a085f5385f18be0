"""The regression-gate step shared by ``kctl bench`` and ``kctl report`` (not a command:
the leading underscore keeps cli.py from registering it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from kctl.bench.gate import check, parse_bounds, workload_differences
from kctl.bench.junit import write_junit
from kctl.bench.results import CellResult, load_run
from kctl.ui.bench_view import gate_table


def run_gate(cells: Sequence[CellResult], baseline: Path, max_regression: str,
             junit_xml: Path | None, out: Console, *, elapsed_s: float = 0.0) -> bool:
    """Prints the gate's verdict; writes JUnit XML when asked; True when nothing regressed."""
    bounds = parse_bounds(max_regression)
    base_cells = load_run(baseline)
    result = check(cells, base_cells, bounds)
    diffs = workload_differences(cells, base_cells)
    if diffs:
        out.print(f"gate: WARNING: the baseline {baseline} ran a different workload: "
                  f"{', '.join(diffs)}", highlight=False)
    if junit_xml:
        write_junit(result, junit_xml, elapsed_s=elapsed_s)
    for name in result.missing_in_baseline:
        out.print(f"gate: cell {name} is not in the baseline {baseline}: not checked", highlight=False)
    for name in result.missing_now:
        out.print(f"gate: baseline cell {name} was not run: not checked", highlight=False)
    if not result.checks:
        out.print(f"gate: FAILED: nothing checked: no cell and bounded metric in common with the "
                  f"baseline {baseline} (cells now: {', '.join(c.label for c in cells) or 'none'}; "
                  "a renamed matrix needs a new baseline)", highlight=False)
        return False
    if result.ok:
        out.print(gate_table(result))
        out.print(f"gate: passed: {len(result.checks)} check(s) within {max_regression} "
                  "plus the repetitions' spread", highlight=False)
        return True
    out.print(gate_table(result, only_regressions=True))
    out.print(f"gate: FAILED: {len(result.regressions)} of {len(result.checks)} check(s) regressed "
              f"beyond {max_regression} plus the repetitions' spread (baseline {baseline})",
              highlight=False)
    return False
