"""How long kctl takes to start, next to the tools its users type the same words into.

Timed, each as a subprocess writing to /dev/null, best and median of --runs wall times:

- `kctl --version`           (target < 0.15 s: answered before Typer or any command loads)
- `kctl --help`              (the command list, from kctl/cli.py's table)
- `kctl decode --help`       (target < 0.3 s: loads decode's module only)
- `kctl produce --help`
- `python -c pass`           (the floor: the interpreter alone)
- `tshark --version`, `kcat -V` when installed (the peers a user runs from the same shell)

Then the import profile (`python -X importtime`) of `kctl decode --help`: the modules
with the largest cumulative import time.

Run: .venv/bin/python benchmarks/startup.py [--runs 15]   (under cpu-exclusive for figures)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KCTL = [sys.executable, "-m", "kctl"]
TARGETS = {"kctl --version": 0.15, "kctl decode --help": 0.3}


def timed(cmd: list[str], runs: int) -> tuple[float, float]:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, check=False)
        walls.append(time.perf_counter() - t0)
    return min(walls), statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    cases = [("python -c pass", [sys.executable, "-c", "pass"]),
             ("kctl --version", KCTL + ["--version"]),
             ("kctl --help", KCTL + ["--help"]),
             ("kctl decode --help", KCTL + ["decode", "--help"]),
             ("kctl produce --help", KCTL + ["produce", "--help"])]
    if shutil.which("tshark"):
        cases.append(("tshark --version", ["tshark", "--version"]))
    if shutil.which("kcat"):
        cases.append(("kcat -V", ["kcat", "-V"]))
    print(f"{'command':<22} {'best s':>8} {'median s':>9}  target")
    for name, cmd in cases:
        best, med = timed(cmd, args.runs)
        target = TARGETS.get(name)
        verdict = "" if target is None else (f"< {target} s: {'reached' if med < target else 'NOT reached'}")
        print(f"{name:<22} {best:>8.3f} {med:>9.3f}  {verdict}")
    prof = subprocess.run([sys.executable, "-X", "importtime", "-m", "kctl", "decode", "--help"],
                          capture_output=True, text=True, cwd=ROOT)
    rows = []
    for line in prof.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2][1:].rstrip()))
    total = sum(us for us, name in rows if not name.startswith(" "))
    print(f"\npython -X importtime -m kctl decode --help: {total / 1e3:.0f} ms of imports at top level; "
          "largest cumulative:")
    for us, name in sorted(rows, reverse=True)[:10]:
        print(f"  {us / 1e3:7.1f} ms  {name.strip()}")


if __name__ == "__main__":
    main()
