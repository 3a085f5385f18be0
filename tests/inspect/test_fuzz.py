"""The fuzz campaign of tests/inspect/fuzz.py in CI: the regression corpus first, then a
bounded mutation run (KCTL_FUZZ_SECONDS, default 25 s; KCTL_FUZZ_SEED picks the mutations,
default: a new seed per run, printed), then a few seconds of each coverage-guided atheris
target when atheris is installed.

A failing input is written to tests/inspect/fuzz_corpus/ and the test fails naming it:
commit it with the fix, and it is replayed on every run from then on.

Limits: CI's are ten times the issue's targets (100 ms per 64 KiB, 64 MiB) so that a
loaded machine does not fail the build; the long run (``python -m tests.inspect.fuzz``)
reports the figures against the targets themselves.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.inspect import fuzz

CI_S_PER_64K = 10 * fuzz.TARGET_S_PER_64K
CI_MEM_BYTES = fuzz.TARGET_MEM_BYTES


def test_regression_corpus_replays_clean():
    rep = fuzz.Report()
    entries = list(fuzz.corpus_inputs())
    for target, data, _path in entries:
        fuzz.check(target, data, rep, s_per_64k=CI_S_PER_64K, mem_bytes=CI_MEM_BYTES, corpus=None)
    assert rep.inputs == len(entries)
    assert not rep.findings, "\n".join(f"{f.target} {f.kind}: {f.detail} ({p})" for f, (_, _, p)
                                       in zip(rep.findings, entries))


def test_seeds_are_real_captures_that_decode_cleanly():
    s = fuzz.seeds()
    assert len(s.captures) >= 2 and len(s.frames) > 50 and len(s.batches) >= 10
    for target, pool in (("capture", s.captures), ("frame", s.frames), ("batches", s.batches)):
        for data in pool:
            assert fuzz.run_one(target, data).error is None


def test_mutation_campaign():
    seconds = float(os.environ.get("KCTL_FUZZ_SECONDS", "25"))
    seed = int(os.environ.get("KCTL_FUZZ_SEED", str(random.SystemRandom().randrange(1 << 30))))
    print(f"fuzz seed {seed} (KCTL_FUZZ_SEED={seed} repeats this run)")
    rep = fuzz.campaign(seconds=seconds, seed=seed, s_per_64k=CI_S_PER_64K, mem_bytes=CI_MEM_BYTES)
    print("\n".join(rep.lines()))
    assert rep.inputs > 1000 and set(rep.by_target) == set(fuzz.TARGETS)
    assert not rep.findings, "\n".join(rep.lines())


@pytest.mark.parametrize("target", ["frame", "batches"])
def test_atheris_coverage_guided(target, tmp_path):
    """libFuzzer through atheris on the frame and record-batch decoders, seeded with the real
    frames and record sets, for a few seconds (KCTL_FUZZ_SECONDS / 5)."""
    pytest.importorskip("atheris")
    seconds = max(2, int(float(os.environ.get("KCTL_FUZZ_SECONDS", "25")) / 5))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, data in enumerate(fuzz.seeds().of(target)):
        (corpus / f"seed{i}").write_bytes(data)
    run = subprocess.run([sys.executable, "-m", "tests.inspect.atheris_targets", target,
                          f"-max_total_time={seconds}", "-rss_limit_mb=2048", "-timeout=5",
                          f"-artifact_prefix={tmp_path}/", str(corpus)],
                         capture_output=True, text=True, timeout=seconds + 120,
                         cwd=fuzz.HERE.parent.parent)
    crashes = [p for p in tmp_path.iterdir() if p.is_file()]
    for p in crashes:   # keep what it found as a regression input
        shutil.copy(p, fuzz.CORPUS / f"{'frame' if target == 'frame' else 'batches'}-atheris-"
                    f"{p.name.split('-')[-1][:16]}.bin")
    assert run.returncode == 0 and not crashes, run.stderr[-3000:]
    assert "Done" in run.stderr, run.stderr[-2000:]
