"""`kctl decode --summary` on issue 13's hostile captures, next to tshark on the same files.

Every input row of the issue (and a few more of the same kind) is built by
tests/inspect/adversarial.py, written under /tmp, and decoded by a subprocess:

- `kctl decode F --port 9092 --summary --json`     (this tree)
- the same with `--baseline-python PY`, an interpreter whose `kctl` is another version
  (e.g. a copy of .venv whose editable install points at main before the fix), if given
- `tshark -r F -d tcp.port==9092,kafka -T json`   (Wireshark's Kafka dissector, defaults)

Each row prints wall time, time per MB of input after start-up (the time of the same
command on an empty capture), peak RSS of the decoding process (RUSAGE_CHILDREN of a
wrapper whose only child it is), exit status, and whether stderr held a Python traceback.
Targets (issue 13, judged for kctl's rows): no traceback; under 1 s per MB of input plus
start-up; peak RSS under 150 MB. A run over --timeout seconds is stopped and shown as such.

Run: .venv/bin/python benchmarks/decode_adversarial.py [--baseline-python OTHER/bin/python]
     [--timeout 120] [--no-tshark]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.inspect import adversarial as adv  # noqa: E402
from tests.inspect import capture_builder as cb  # noqa: E402

TARGET_S_PER_MB = 1.0
TARGET_RSS_MB = 150.0
#: Start-up is timed on an empty capture; a real one imports a few more modules (codecs).
SLACK_S = 0.25

# Runs ARGV with stdout discarded; prints {rc, secs, rss_kib, traceback, tail} as JSON.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
try:
    r = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=float(sys.argv[1]))
    rc, err = r.returncode, r.stderr.decode(errors="replace")
except subprocess.TimeoutExpired as e:
    rc, err = "timeout", (e.stderr or b"").decode(errors="replace")
secs = time.perf_counter() - t0
print(json.dumps({"rc": rc, "secs": secs, "traceback": "Traceback" in err,
                  "rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "tail": err.strip().splitlines()[-1][:160] if err.strip() else ""}))
"""


def measure(argv: list[str], timeout: float, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> dict:
    # cwd: not a kctl checkout, or `python -m kctl` would import that tree's kctl.
    run = subprocess.run([sys.executable, "-c", _WRAPPER, str(timeout), *argv],
                         capture_output=True, text=True, env=env, cwd=cwd or tempfile.gettempdir())
    return json.loads(run.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-python", help="an interpreter whose kctl is another version")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--no-tshark", action="store_true")
    a = ap.parse_args()
    tshark = None if a.no_tshark else shutil.which("tshark")

    work = Path(tempfile.mkdtemp(prefix="kctl-adversarial-"))
    empty = work / "empty.pcap"
    empty.write_bytes(cb.capture([]))
    files = []
    for row in adv.ROWS:
        path = work / f"{row.name}.pcap"
        path.write_bytes(row.build())
        files.append((row, path))

    pythons = {"kctl": sys.executable}
    if a.baseline_python:
        pythons["kctl baseline"] = a.baseline_python
    envs: dict[str, dict[str, str] | None] = {name: None for name in pythons}

    def kctl(path: Path, name: str = "kctl") -> list[str]:
        return [pythons[name], "-m", "kctl", "decode", str(path), "--port", str(adv.PORT),
                "--summary", "--json"]

    def tshark_argv(path: Path) -> list[str]:
        return [tshark, "-n", "-r", str(path), "-d", f"tcp.port=={adv.PORT},kafka", "-T", "json"]

    tshark_env = {**os.environ, "HOME": str(work)}
    startup = {name: measure(kctl(empty, name), a.timeout, env)["secs"] for name, env in envs.items()}
    if tshark:
        startup["tshark"] = measure(tshark_argv(empty), a.timeout, tshark_env)["secs"]
    print("start-up (empty capture): " + ", ".join(f"{k} {v:.2f} s" for k, v in startup.items()))
    print("peers: tshark " + (subprocess.run([tshark, "--version"], capture_output=True, text=True)
                              .stdout.splitlines()[0] if tshark else "not run")
          + ", -T json, Kafka dissector on port 9092, its default preferences (TCP reassembly on, "
          "decompression on)")
    print(f"targets: no traceback, < {TARGET_S_PER_MB:.0f} s per MB after start-up "
          f"(+{SLACK_S} s measurement slack), peak RSS < {TARGET_RSS_MB:.0f} MB")
    head = f"{'input':<20} {'bytes':>9}  {'decoder':<14} {'wall s':>7} {'s/MB':>7} {'RSS MB':>7}  exit  tb  target"
    print(head)
    print("-" * len(head))
    missed = []
    for row, path in files:
        size = path.stat().st_size
        runs = [(name, measure(kctl(path, name), a.timeout, env)) for name, env in envs.items()]
        if tshark:
            runs.append(("tshark", measure(tshark_argv(path), a.timeout, tshark_env)))
        for i, (name, r) in enumerate(runs):
            per_mb = max(0.0, r["secs"] - startup[name]) / max(size / 1e6, 1e-9)
            rss_mb = r["rss_kib"] * 1024 / 1e6
            met = (not r["traceback"] and r["rc"] != "timeout"
                   and r["secs"] - startup[name] <= TARGET_S_PER_MB * size / 1e6 + SLACK_S
                   and rss_mb < TARGET_RSS_MB)
            if name == "kctl" and not met:
                missed.append(row.name)
            # s/MB means little for a file of a few KB: shown from 64 KiB on.
            rate = f"{per_mb:7.2f}" if size >= 65536 else f"{'-':>7}"
            verdict = ("met" if met else "MISSED") if name.startswith("kctl") else "-"
            print(f"{row.name if i == 0 else '':<20} {size if i == 0 else '':>9}  {name:<14} "
                  f"{r['secs']:7.2f} {rate} {rss_mb:7.0f}  {str(r['rc']):>4}  "
                  f"{'yes' if r['traceback'] else 'no':>3}  {verdict}"
                  + (f"   ({r['tail']})" if name.startswith("kctl") and r["rc"] not in (0,) else ""))
    print()
    for row, _ in files:
        print(f"{row.name}: {row.what}")
    print("\nkctl: every target met" if not missed else f"\nkctl: targets MISSED on {missed}")


if __name__ == "__main__":
    main()
