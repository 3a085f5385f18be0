"""``kctl broker``: run the embedded broker (Tansu, in memory) in the foreground."""

from __future__ import annotations

import typer

from kctl.broker import EmbeddedBroker
from kctl.commands._stop import sigterm_as_ctrl_c
from kctl.errors import BrokerUnavailableError


def broker(
    port: int = typer.Option(None, "--port", "-p", min=1, max=65535,
                             help="Loopback port to listen on (default: a free one)."),
) -> None:
    """Run a local Kafka-compatible broker (Tansu, in memory) until Ctrl-C or SIGTERM."""
    # Ctrl-C and SIGTERM both stop the broker in order (even when started with
    # SIGINT ignored, as background jobs of a non-interactive shell are).
    try:
        with sigterm_as_ctrl_c(sigint=True), EmbeddedBroker(port=port) as b:
            typer.echo(f"broker ready at {b.bootstrap} (Tansu, in-memory); Ctrl-C to stop")
            status = b.wait()
            raise BrokerUnavailableError(
                f"the broker exited by itself (status {status}); its log ends with:\n{b.log_tail()}")
    except KeyboardInterrupt:
        typer.echo("broker stopped")


def register(app: typer.Typer) -> None:
    app.command("broker")(broker)
