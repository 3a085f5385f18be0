"""Coverage-guided fuzz targets (atheris, libFuzzer) for the frame and record-batch decoders.

    .venv/bin/python -m tests.inspect.atheris_targets frame -max_total_time=600 CORPUS_DIR
    .venv/bin/python -m tests.inspect.atheris_targets batches -max_total_time=600 CORPUS_DIR

Each input is what tests/inspect/fuzz.py's target of the same name takes; anything but
kctl's own errors (or a disagreement between the record decoders) is a crash that libFuzzer
saves with its input. kctl's protocol and inspect modules are instrumented for coverage.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["kctl"]):
    from kctl.errors import KctlError
    from tests.inspect.fuzz import run_batches, run_frame

TARGETS = {"frame": run_frame, "batches": run_batches}


def main() -> None:
    target = TARGETS[sys.argv[1]]

    def one(data: bytes) -> None:
        try:
            target(data)
        except KctlError:
            pass
    atheris.Setup([sys.argv[0], *sys.argv[2:]], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
