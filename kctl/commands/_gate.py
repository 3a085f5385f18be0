"""The regression-gate step shared by ``kctl bench`` and ``kctl report`` (not a command:
the leading underscore keeps cli.py from registering it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from kctl.bench.gate import check, parse_bounds, workload_differences
from kctl.bench.junit import write_junit
from kctl.bench.results import CellResult, load_run
from kctl.errors import ConfigError
from kctl.ui.bench_view import gate_table


@dataclass(frozen=True, slots=True)
class Baseline:
    """A ``--baseline`` run as read once, before the work: its path (for the gate's
    lines) and its cells."""

    path: Path
    cells: tuple[CellResult, ...]


def load_baseline(path: Path) -> Baseline:
    """Reads ``--baseline`` before the runs or the table, so a bad one fails first, with
    one line; the gate judges against what was read here."""
    if not path.exists():
        raise ConfigError(f"--baseline {path}: no such file")
    try:
        return Baseline(path, tuple(load_run(path)))
    except ConfigError as e:
        raise ConfigError(f"--baseline {e}") from None


def run_gate(cells: Sequence[CellResult], baseline: Baseline, max_regression: str,
             junit_xml: Path | None, out: Console, *, elapsed_s: float = 0.0) -> bool:
    """Prints the gate's verdict; writes JUnit XML when asked; True when nothing regressed."""
    bounds = parse_bounds(max_regression)
    result = check(cells, baseline.cells, bounds)
    diffs = workload_differences(cells, baseline.cells)
    if diffs:
        out.print(f"gate: WARNING: the baseline {baseline.path} ran a different workload: "
                  f"{', '.join(diffs)}", highlight=False)
    if junit_xml:
        write_junit(result, junit_xml, elapsed_s=elapsed_s)
    for name in result.missing_in_baseline:
        out.print(f"gate: cell {name} is not in the baseline {baseline.path}: not checked", highlight=False)
    for name in result.missing_now:
        out.print(f"gate: baseline cell {name} was not run: not checked", highlight=False)
    if not result.checks:
        out.print(f"gate: FAILED: nothing checked: no cell and bounded metric in common with the "
                  f"baseline {baseline.path} (cells now: {', '.join(c.label for c in cells) or 'none'}; "
                  "a renamed matrix needs a new baseline)", highlight=False)
        return False
    if result.ok:
        out.print(gate_table(result))
        out.print(f"gate: passed: {len(result.checks)} check(s) within {max_regression} "
                  "plus the repetitions' spread", highlight=False)
        return True
    out.print(gate_table(result, only_regressions=True))
    out.print(f"gate: FAILED: {len(result.regressions)} of {len(result.checks)} check(s) regressed "
              f"beyond {max_regression} plus the repetitions' spread (baseline {baseline.path})",
              highlight=False)
    return False
