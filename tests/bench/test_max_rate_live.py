"""``kctl bench --find-max-rate`` against the embedded broker behind the fault proxy: the
proxy holds every Produce answer 100 ms and the producer keeps one request in flight
with small batches, so the path sustains about one full batch per 100 ms. The search
must converge on that rate: steps above it fall short of their target (failed, however
their latency looks) and steps below it meet the bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy

pytestmark = pytest.mark.broker

THROTTLE = ["-X", "max.in.flight.requests.per.connection=1", "-X", "batch.size=2000", "-X", "acks=1",
            "-X", "enable.idempotence=false"]


def kctl(*args, timeout=240):
    run = subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run


def test_find_max_rate_converges_on_the_throttled_rate(broker, tmp_path):
    with InspectorProxy([broker.bootstrap]) as proxy:
        proxy.set_faults(FaultPlan(delay_ms=100, delay_apis=("Produce",)))
        # What the throttled path sustains: a run well above it, all of its records
        # acknowledged (the backlog drains at the path's rate). Records as the search's
        # steps send them (both --no-id-headers), so batches hold as many.
        cap_json = tmp_path / "cap.json"
        kctl("produce", "-b", proxy.bootstrap, "-t", "cap", "--partitions", "1", "--workers", "1",
             "--rate", "400", "--duration", "2s", "--quiet", "--no-id-headers", "--json-out", str(cap_json), *THROTTLE)
        cap = json.loads(cap_json.read_text())["rates"]["records_per_s"]
        assert 80 < cap < 400, cap            # ~17 records per batch, one batch per ~100 ms
        out = tmp_path / "search"
        run = kctl("bench", "--find-max-rate", "--slo", "p99<1500ms", "-b", proxy.bootstrap, "-t", "mr",
                   "--partitions", "1", "--workers", "1", "--rate", "40", "--warmup", "500ms",
                   "--duration", "2s", "--precision", "10%", "--max-steps", "10", "--no-id-headers",
                   "--out", str(out), *THROTTLE)
    result = json.loads((out / "max-rate.json").read_text())
    steps = result["steps"]
    assert result["converged"], run.stdout
    # The rate found is the throttled rate, within the search's precision (10%) and the
    # noise of a shared machine (the cap is one 2 s measurement itself).
    assert 0.7 * cap <= result["found_rate"] <= 1.15 * cap, (cap, result)
    assert result["failed_rate"] > result["found_rate"]
    # Above the throttle, steps failed because they fell short of their target.
    # (A step just above the capacity can be the first to fail: then none is 1.2 x above it.)
    above = [s for s in steps if s["target_rate"] > 1.2 * cap]
    assert all(not s["passed"] and "short of" in s["reason"] for s in above)
    assert any("short of" in s["reason"] for s in steps if s["target_rate"] > cap)
    assert all(s["passed"] for s in steps if s["target_rate"] < 0.6 * cap)
    assert (out / "max-rate.png").stat().st_size > 10_000
    assert run.stdout.splitlines()[-1].startswith(f"max rate: {result['found_rate']:,.0f} records/s")
    assert "FAIL: achieved" in run.stdout                 # the step table says why
