"""The highest version of each API that kctl's clients speak (``CLIENT_MAX_VERSIONS``).

Why a table: ``schema_data.py`` is generated from Kafka's message definitions and
grows with every Kafka release. If the engine spoke the schema's newest version of
everything, regenerating the schema would change what kctl sends (new fields, new
meanings) without anyone reviewing it. Instead the engine's clients (``NetworkClient``
and ``BlockingClient``, through ``engine/handshake.py``) negotiate each API up to the
version in this table, and an API that is not here is never sent. Raising an entry is a
reviewed change: the request builder (``protocol/requests.py``) and whatever reads the
answer must handle that version's fields first. The decoder (``kctl decode``,
``kctl inspect``) is not limited by this table: it reads every version the schema knows.

Sans-IO: data only (conventions rule 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kctl.protocol import schema

__all__ = ["CLIENT_MAX_VERSIONS", "CLIENT_MAX_VERSIONS_BY_NAME", "TRANSACTION_V1_MAX_VERSIONS"]

#: API name -> the highest version kctl's clients send. Why each stops where it does:
CLIENT_MAX_VERSIONS_BY_NAME: Final[Mapping[str, int]] = MappingProxyType({
    "ApiVersions": 4,
    "SaslHandshake": 1,
    "SaslAuthenticate": 2,
    # v13 adds a top-level error code (KIP-1102, rebootstrap) that kctl does not act on.
    "Metadata": 12,
    # v13 names topics by id (requests.produce falls back to v12 without ids); a
    # transactional producer of the transaction protocol v1 stops at v11 (KIP-890).
    "Produce": 13,
    # v6 is two-phase commit (KIP-939), which kctl does not offer.
    "InitProducerId": 5,
    "CreateTopics": 7,
    # v18 adds a replica's high watermark to the request (brokers only).
    "Fetch": 17,
    "FindCoordinator": 6,
    # v4+ is the brokers' batched form (KIP-890), not a producer's.
    "AddPartitionsToTxn": 3,
    # v5 is the transaction protocol v2 (KIP-890 part 2), which kctl does not speak.
    "EndTxn": 4,
    # The consumer (engine/offsets.py, coordinator.py, consumer_coordinator.py).
    # v10 carries the request's timeout (KIP-1075); v11 only adds a timestamp kctl never asks.
    "ListOffsets": 10,
    # v10 names topics by id (KIP-848's consumer protocol), which kctl's classic consumer does not.
    "OffsetFetch": 9,
    "OffsetCommit": 9,
    # v8 adds the rejoin reason (KIP-800); v9's skip-assignment for a static leader (KIP-814)
    # is not acted on by kctl's coordinator, so it stops before it.
    "JoinGroup": 8,
    "SyncGroup": 5,
    "Heartbeat": 4,
    "LeaveGroup": 5,
})

#: API key -> the highest version kctl's clients send.
CLIENT_MAX_VERSIONS: Final[Mapping[int, int]] = MappingProxyType({
    schema.API_BY_NAME[name].api_key: version for name, version in CLIENT_MAX_VERSIONS_BY_NAME.items()
})

#: Caps inside a transaction of the transaction protocol v1 (AddPartitionsToTxn before
#: producing): Produce v12+ tells the broker the producer adds partitions implicitly
#: (KIP-890 part 2), so a v1 producer must not send it (as the Java client caps it).
TRANSACTION_V1_MAX_VERSIONS: Final[Mapping[str, int]] = MappingProxyType({"Produce": 11})
