"""Composes kctl's commands into one Typer app; nothing else lives here.

Each module in ``kctl.commands`` defines ``register(app)``; they are found by
name so adding a command is adding a file. A ``KctlError`` that escapes a
command is printed as one line on stderr with exit status 2: a user mistake
never shows a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import kctl
import kctl.commands
from kctl.errors import KctlError

app = typer.Typer(
    name="kctl",
    help="Kafka load generator and wire-protocol inspector that speaks the Kafka protocol itself.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kctl {kctl.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print kctl's version and exit."),
) -> None:
    """Kafka load generator and wire-protocol inspector."""


for _info in sorted(pkgutil.iter_modules(kctl.commands.__path__), key=lambda m: m.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"kctl.commands.{_info.name}").register(app)


def main() -> None:
    try:
        app()
    except KctlError as e:
        print(f"kctl: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("kctl: interrupted", file=sys.stderr)
        sys.exit(130)
