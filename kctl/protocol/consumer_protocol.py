"""The consumer protocol's embedded messages: what a consumer group member writes inside
JoinGroup's ``protocols[].metadata`` (``ConsumerProtocolSubscription``) and the leader
inside SyncGroup's ``assignments[].assignment`` (``ConsumerProtocolAssignment``) when the
group's ``protocol_type`` is ``"consumer"`` (Java's ``ConsumerProtocol``).

Each is a 2-byte version followed by the message of that version, whose layout comes from
the one schema source (``schema_data.py``). A version newer than kctl knows is read as the
newest it knows: later versions only append fields, as Java relies on too. The engine's
assignors (``engine/assignors.py``) and ``kctl decode`` both read and write them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kctl.errors import DecodeError
from kctl.protocol import messages
from kctl.protocol.primitives import Reader

__all__ = ["CONSUMER_PROTOCOL_TYPE", "SUBSCRIPTION_VERSION", "ASSIGNMENT_VERSION",
           "ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "Embedded",
           "encode_embedded", "decode_subscription", "decode_assignment"]

#: The ``protocol_type`` of groups whose members speak this protocol.
CONSUMER_PROTOCOL_TYPE: Final = "consumer"
ConsumerProtocolSubscription = messages.message_class("ConsumerProtocolSubscription")
ConsumerProtocolAssignment = messages.message_class("ConsumerProtocolAssignment")
#: The versions kctl writes (and the newest it reads field by field).
SUBSCRIPTION_VERSION: Final = 3
ASSIGNMENT_VERSION: Final = 3


@dataclass(frozen=True, slots=True)
class Embedded:
    """One embedded message: the version written before it, the version its fields were
    read with (the newest kctl knows, when the writer's is newer), and the message."""
    version: int
    read_as: int
    message: messages.Message


def encode_embedded(msg: messages.Message, version: int) -> bytes:
    """The 2-byte version followed by ``msg`` in that version."""
    return version.to_bytes(2, "big", signed=True) + messages.encode(msg, version)


def _decode(cls: type, data: bytes, what: str, latest: int) -> Embedded:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version", offset=0, field="version")
    version = Reader(data).int16("version")
    if version < 0:
        raise DecodeError(f"{what} version {version} is negative", offset=0, field="version")
    if version <= latest:
        return Embedded(version, version, messages.decode(cls, version, data, 2))
    return Embedded(version, latest, messages.decode_from(Reader(data, 2), cls, latest))


def decode_subscription(data: bytes) -> Embedded:
    """A JoinGroup ``metadata`` of a consumer group; ``DecodeError`` when it is not one."""
    return _decode(ConsumerProtocolSubscription, data, "consumer protocol subscription",
                   SUBSCRIPTION_VERSION)


def decode_assignment(data: bytes) -> Embedded:
    """A SyncGroup ``assignment`` of a consumer group (not empty: an empty one is no
    message, the member got nothing); ``DecodeError`` when it is not one."""
    return _decode(ConsumerProtocolAssignment, data, "consumer protocol assignment",
                   ASSIGNMENT_VERSION)
