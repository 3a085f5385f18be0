"""``kctl broker``: run the embedded broker (Tansu, in memory) in the foreground."""

from __future__ import annotations

import signal
from types import FrameType

import typer

from kctl.broker import EmbeddedBroker
from kctl.errors import BrokerUnavailableError


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def broker(
    port: int = typer.Option(None, "--port", "-p", min=1, max=65535,
                             help="Loopback port to listen on (default: a free one)."),
) -> None:
    """Run a local Kafka-compatible broker (Tansu, in memory) until Ctrl-C."""
    # Ctrl-C and SIGTERM both stop the broker in order (even when started with
    # SIGINT ignored, as background jobs of a non-interactive shell are).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_term = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        with EmbeddedBroker(port=port) as b:
            typer.echo(f"broker ready at {b.bootstrap} (Tansu, in-memory); Ctrl-C to stop")
            status = b.wait()
            raise BrokerUnavailableError(
                f"the broker exited by itself (status {status}); its log ends with:\n{b.log_tail()}")
    except KeyboardInterrupt:
        typer.echo("broker stopped")
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def register(app: typer.Typer) -> None:
    app.command("broker")(broker)
