"""kctl: a Kafka load generator and wire-protocol inspector."""

__version__ = "0.1.0"
