"""Composes kctl's commands; nothing else lives here.

How this works: ``main()`` looks at the first argument only. ``--version`` and the
command list (``kctl``, ``kctl --help``) are answered from the table below without
importing Typer or any command, so they are instant. A command's module
(``kctl/commands/<name>.py``, which defines ``register(app)``) is imported only when
that command runs or its ``--help`` is asked for; Typer builds its options from the
function signature then.

Every mistake a user can make ends the same way, on one line on stderr, exit status 2:
``kctl: error: ...`` -- unknown command or option, a missing or malformed value (Typer's
usage errors, caught here instead of Typer's boxed rendering) and every ``KctlError`` a
command raises. Ctrl-C exits 130, and so does SIGTERM: it is taken as Ctrl-C by every
command (commands/_stop.py), so a run stopped by ``kill`` or ``timeout`` still ends in
order and writes its summary. Help is plain text (Rich markup off, so square brackets
in help survive), and an option's value is shown perf-test style as its name in capitals
(``--num-records NUM-RECORDS``) unless the command names it (``-X NAME=VALUE``).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from typing import Any

import kctl

#: Every command: name -> the first line of its function's docstring (tests keep them equal).
COMMANDS: dict[str, str] = {
    "produce": "Load-test a cluster: open-loop rate schedule, three latency clocks, live stats.",
    "consume": "Consume a topic: several consumer processes, e2e latency from identity headers, lag, backlog drain.",
    "bench": "Compare producer settings over a matrix, or find the highest rate within a latency bound.",
    "report": "Compare earlier runs: the comparison table and the charts, no broker needed.",
    "metadata": "List the cluster's brokers, topics, partitions and leaders, and each broker's API versions.",
    "inspect": "Run a transparent Kafka proxy: live stats or frames, pcapng capture, fault injection.",
    "decode": "Decode Kafka frames from pcap/pcapng captures (tcpdump, Wireshark, kctl inspect).",
    "analyze": "Decode captures in parallel on Spark into Parquet; print latency, throughput, client, error and damage (notice) summaries.",
    "replay": "Produce the rows of a dataset to a topic from Spark executors, reported like kctl produce.",
    "broker": "Run a local Kafka-compatible broker (Tansu, in memory) until Ctrl-C or SIGTERM.",
}

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def root_help() -> str:
    width = max(map(len, COMMANDS))
    lines = ["Usage: kctl [--version] [--help] COMMAND [ARGS]...", "",
             "  Kafka load generator and wire-protocol inspector that speaks the Kafka protocol itself.",
             "", "Commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    lines += ["", "Options:", "  --version  Print kctl's version and exit.",
              "  --help     Show this message and exit.", "",
              "Run 'kctl COMMAND --help' for a command's options."]
    return "\n".join(lines)


def _fail(message: str, status: int = EXIT_USAGE) -> None:
    print(f"kctl: error: {message}", file=sys.stderr)
    sys.exit(status)


def load_command(name: str) -> tuple[Any, Any]:
    """The command's module and its Click command as Typer builds it."""
    import importlib

    import typer
    import typer.main

    module = importlib.import_module(f"kctl.commands.{name}")
    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                      context_settings={"help_option_names": ["-h", "--help"]})
    module.register(app)
    return module, typer.main.get_command(app)


def run_command(name: str, args: Sequence[str]) -> None:
    """Runs one command; every failure ends as one line and an exit status.

    A command module may define ``expand_args(args) -> args`` to accept spellings Click
    cannot parse (perf-test's ``--producer-props a=1 b=2``: several values after one flag).
    """
    import typer

    from kctl.errors import KctlError

    try:
        module, command = load_command(name)
        args = list(getattr(module, "expand_args", list)(args))
        if "-h" in args or "--help" in args:
            from kctl.ui.help_text import render_help
            print(render_help(command, f"kctl {name}"))
            return
        from kctl.commands._stop import sigterm_as_ctrl_c
        with sigterm_as_ctrl_c():     # SIGTERM (kill, timeout(1), systemd) stops as Ctrl-C does
            status = command.main(args=args, prog_name=f"kctl {name}", standalone_mode=False)
    except typer.TyperException as e:      # Typer's usage errors: unknown option, bad value, ...
        text = e.format_message() if hasattr(e, "format_message") else str(e)
        text = " ".join(text.split()).rstrip(".")
        _fail(f"{name}: {text[:1].lower()}{text[1:]} (see 'kctl {name} --help')")
        return
    except KctlError as e:
        _fail(str(e))
        return
    except (KeyboardInterrupt, typer.Abort):
        status = EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``kctl decode ... | head``): stop quietly, as Unix tools do.
        sys.stderr.close()
        sys.exit(1)
    if status == EXIT_INTERRUPTED:
        print("kctl: interrupted", file=sys.stderr)
    if isinstance(status, int) and status:
        sys.exit(status)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(root_help())
        return
    first = args[0]
    if first == "--version":
        print(f"kctl {kctl.__version__}")
        return
    if first.startswith("-"):
        _fail(f"no such option: {first} (see 'kctl --help')")
    if first not in COMMANDS:
        close = difflib.get_close_matches(first, COMMANDS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        _fail(f"no such command: {first} ({hint}commands: {', '.join(COMMANDS)})")
    run_command(first, args[1:])


def _eager_app() -> Any:
    """Every command on one Typer app: for in-process tests through
    ``typer.testing.CliRunner`` and for library users. ``main()`` never builds it."""
    import importlib

    import typer

    eager = typer.Typer(name="kctl", add_completion=False, rich_markup_mode=None,
                        pretty_exceptions_enable=False, no_args_is_help=True)

    @eager.callback()
    def _root() -> None:
        """Kafka load generator and wire-protocol inspector."""

    for name in COMMANDS:
        importlib.import_module(f"kctl.commands.{name}").register(eager)
    return eager


def __getattr__(name: str) -> Any:
    if name == "app":
        value = globals()["app"] = _eager_app()
        return value
    raise AttributeError(name)
