"""The layering rules of docs/DESIGN.md, enforced by import-linter's contracts in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is part of the test extra"
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "broken" not in run.stdout.split("Contracts:")[-1].replace("0 broken", "")


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "bash tools/setup.sh && .venv/bin/python -m pytest -q"
    assert command in readme
    assert ci.strip().splitlines()[-1] == command
    assert "KCTL_EXTRAS=broker bash tools/setup.sh && .venv/bin/kctl produce" in readme
