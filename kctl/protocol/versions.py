"""API version negotiation, sans-IO.

Given what a broker advertises in its ApiVersions response and what kctl's
schema knows, pick for each API the highest version both sides support (the
Java client's ``NodeApiVersions.latestUsableVersion``). An API the broker does
not advertise, or whose ranges do not overlap, is absent from the result; the
caller fails clearly if it needs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kctl.errors import UnsupportedVersionError
from kctl.protocol import schema


@dataclass(frozen=True, slots=True)
class VersionRange:
    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class NegotiatedVersions:
    """The version kctl will speak per API key, and what the broker offered."""

    chosen: Mapping[int, int]
    broker: Mapping[int, VersionRange]
    local_max: Mapping[int, int] | None = None   # kctl's caps (client_versions), when negotiated with them

    def version_for(self, api_key: int) -> int | None:
        return self.chosen.get(api_key)

    def require(self, api_key: int) -> int:
        v = self.chosen.get(api_key)
        if v is None:
            name = schema.API_BY_KEY[api_key].name if api_key in schema.API_BY_KEY else str(api_key)
            offered = self.broker.get(api_key)
            offer = (f"v{offered.min_version}-v{offered.max_version}" if offered
                     else "does not offer it")
            info = schema.API_BY_KEY.get(api_key)
            if self.local_max is not None and api_key not in self.local_max:
                raise UnsupportedVersionError(
                    f"kctl's clients do not send {name} (it is not in client_versions.CLIENT_MAX_VERSIONS)")
            top = info.max_version if info else 0
            if self.local_max is not None:
                top = min(top, self.local_max[api_key])
            ours = f"v{info.min_version}-v{top}" if info else "none"
            raise UnsupportedVersionError(f"no common version of {name}: broker {offer}, kctl {ours}")
        return v


def negotiate(broker_ranges: Iterable[VersionRange],
              local_max: Mapping[int, int] | None = None) -> NegotiatedVersions:
    """Highest common version per API. ``local_max`` (API key -> highest version, e.g.
    ``client_versions.CLIENT_MAX_VERSIONS``) caps kctl's side, and an API it does not
    list is not chosen at all; without it, the schema's versions are kctl's side."""
    broker = {r.api_key: r for r in broker_ranges}
    chosen: dict[int, int] = {}
    for key, r in broker.items():
        info = schema.API_BY_KEY.get(key)
        if info is None:
            continue
        hi = min(info.max_version, r.max_version)
        if local_max is not None:
            if key not in local_max:
                continue
            hi = min(hi, local_max[key])
        lo = max(info.min_version, r.min_version)
        if hi >= lo:
            chosen[key] = hi
    return NegotiatedVersions(chosen=chosen, broker=broker, local_max=local_max)
