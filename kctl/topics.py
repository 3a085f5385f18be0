"""Kafka's rules for topic names (Java's ``org.apache.kafka.common.internals.Topic``).

A legal name is 1 to 249 characters of ``[a-zA-Z0-9._-]`` and is neither ``.`` nor
``..``. kctl checks every topic it would create or produce to before anything is
created, so a bad name is one clear line instead of a topic a real cluster refuses (or,
on a lenient broker, a topic no other Kafka tool can name).
"""

from __future__ import annotations

import re

from kctl.errors import ConfigError

__all__ = ["MAX_TOPIC_NAME_LENGTH", "validate_topic_name"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str, what: str = "--topic") -> str:
    """``name`` when Kafka accepts it; ``ConfigError`` saying why not otherwise."""
    if not name:
        raise ConfigError(f"{what}: a topic name must not be empty")
    if name in (".", ".."):
        raise ConfigError(f"{what} {name!r}: a topic name cannot be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ConfigError(f"{what}: topic name is {len(name)} characters long; Kafka allows at most "
                          f"{MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        bad = "".join(dict.fromkeys(c for c in name if not _LEGAL.fullmatch(c)))
        raise ConfigError(f"{what} {name!r}: illegal character(s) {bad!r}; a topic name may hold "
                          "only ASCII letters, digits, '.', '_' and '-'")
    return name
