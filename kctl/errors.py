"""kctl's exception family.

Local errors (kctl or its caller misused something) are kept apart from remote
ones (a peer broke the protocol, or a broker answered with an error code), as
h11 does: the first is a bug or a user mistake, the second is news about the
other side.

Every error that can reach a user carries a message that says what went wrong
and where; the command layer prints ``str(error)`` on one line and exits
non-zero, so no traceback is shown for a user mistake.
"""

from __future__ import annotations


class KctlError(Exception):
    """Base of every error kctl raises on purpose."""


class ConfigError(KctlError):
    """A setting, option or input file is unknown or invalid."""


class LocalProtocolError(KctlError):
    """kctl was asked to encode something the protocol cannot carry."""


class RemoteProtocolError(KctlError):
    """Bytes from a peer do not follow the Kafka protocol."""


class DecodeError(RemoteProtocolError):
    """Input could not be decoded.

    ``offset`` is the byte position (within the buffer being decoded) where the
    problem was found and ``field`` names what was being read there, as a dotted
    path when the message codec knows it (``topics[0].partitions[2].records``).
    """

    def __init__(self, reason: str, *, offset: int, field: str = "") -> None:
        self.reason = reason
        self.offset = offset
        self.field = field
        where = f"at offset {offset}" + (f" in field {field!r}" if field else "")
        super().__init__(f"{reason} {where}")

    def within(self, field: str, base_offset: int = 0) -> DecodeError:
        """The same error with ``field`` prefixed to its path and its offset shifted."""
        path = f"{field}.{self.field}" if self.field and field else (field or self.field)
        return type(self)(self.reason, offset=self.offset + base_offset, field=path)


class BudgetExceededError(DecodeError):
    """Decoding stopped at a work or memory limit (a decompression budget), not at bad
    bytes: what follows may be well formed, it was not decoded."""


class EncodeError(LocalProtocolError):
    """A value does not fit the wire type it is to be written as."""


class BrokerError(KctlError):
    """A broker answered with a non-zero error code.

    ``name`` is Kafka's error name (``NOT_LEADER_OR_FOLLOWER``); ``retriable``
    follows Kafka's own classification.
    """

    def __init__(self, code: int, name: str, retriable: bool, message: str = "") -> None:
        self.code = code
        self.name = name
        self.retriable = retriable
        self.message = message
        text = f"{name} ({code})" + (f": {message}" if message else "")
        super().__init__(text)


class BrokerUnavailableError(KctlError):
    """A broker could not be reached or the connection broke."""


class BrokerUnreachableError(BrokerUnavailableError):
    """No connection could be opened to a broker (refused, no route, DNS)."""


class AuthenticationError(KctlError):
    """The broker refused kctl's SASL credentials, or TLS could not be established
    (an untrusted or mismatched certificate): retrying with the same settings cannot help."""


class BrokerNotInstalledError(KctlError):
    """The embedded broker's binary is not installed."""


class UnsupportedVersionError(KctlError):
    """kctl and the broker share no version of an API kctl needs."""


class BufferExhaustedError(KctlError):
    """``buffer.memory`` stayed full for ``max.block.ms`` (the Java client's BufferExhaustedException).

    Raised by the send path when the sender could not complete batches fast
    enough to free memory for a new one: the brokers are slow or unreachable,
    or the producer is asked for more than the cluster takes.
    """

    def __init__(
        self, *, requested: int, total_memory: int, available_memory: int, max_block_ms: int
    ) -> None:
        self.requested = requested
        self.total_memory = total_memory
        self.available_memory = available_memory
        self.max_block_ms = max_block_ms
        super().__init__(
            f"buffer.memory ({total_memory} bytes) exhausted for {max_block_ms} ms "
            f"(max.block.ms): could not allocate {requested} bytes, "
            f"{available_memory} bytes available"
        )


class RecordTooLargeError(KctlError):
    """A record or batch can never fit within a configured limit.

    A local error: retrying cannot help; the record, ``batch.size``,
    ``buffer.memory`` or ``max.request.size`` has to change.
    """


class InvalidPartitionError(KctlError):
    """A record names a partition its topic does not have."""
