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


class RetriableError(KctlError):
    """Asked again a little later, it may pass (Kafka's ``RetriableException``): a leader
    that moved, an election under way, a leader's connection that broke. The caller
    chooses how long to keep asking (``engine/setup_retry.py``, bounded by a timeout)."""


class RetriesExhaustedError(KctlError):
    """A step kept failing with errors that may pass until its bound ran out (the Java
    clients' ``TimeoutException`` of a call bounded by ``max.block.ms`` or
    ``default.api.timeout.ms``); ``last`` is the last attempt's error, ``attempts`` how many
    were made, ``bound`` the bound by its Kafka name (``default.api.timeout.ms=60000 ms``)."""

    def __init__(self, what: str, last: KctlError, attempts: int, bound: str) -> None:
        self.last = last
        self.attempts = attempts
        self.bound = bound
        super().__init__(f"{what}: {last} (asked {attempts} time(s) for {bound})")


class EndOffsetsError(KctlError):
    """One ListOffsets round left some partitions of ``topic`` without an end offset
    (``engine/admin.py``'s ``log_end_offsets``): ``offsets`` the partitions answered,
    ``errors`` partition -> why not (no leader, the leader's error, its connection),
    ``topic_error`` why the topic itself is missing from Metadata (then ``errors`` names the
    partitions asked, or is empty when every partition was). Every reason may pass:
    ``RetriableEndOffsetsError``."""

    def __init__(self, topic: str, offsets: dict[int, int], errors: dict[int, str],
                 topic_error: str = "") -> None:
        self.topic = topic
        self.offsets = offsets
        self.errors = errors
        self.topic_error = topic_error
        super().__init__(f"end offsets of {topic!r} unknown ({self.describe_errors()})")

    def describe_errors(self) -> str:
        """The reasons, grouped: ``NOT_LEADER_OR_FOLLOWER from broker 2 (host:port):
        partition(s) 1, 3; no leader (LEADER_NOT_AVAILABLE): partition(s) 4``."""
        by_reason: dict[str, list[int]] = {}
        for partition, why in sorted(self.errors.items()):
            by_reason.setdefault(why, []).append(partition)
        parts = [f"{why}: partition(s) {', '.join(map(str, ps))}" for why, ps in by_reason.items()]
        if self.topic_error and not self.errors:
            parts.append(f"topic {self.topic!r}: {self.topic_error}")
        return "; ".join(parts)


class RetriableEndOffsetsError(EndOffsetsError, RetriableError):
    """``EndOffsetsError`` whose every reason may pass: asked again after a fresh Metadata,
    as the Java consumer's ``OffsetFetcher`` retries until its timer expires."""


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
