"""A group member's timers (the Java client's ``Heartbeat``).

Three deadlines, all in monotonic ns passed in:

- heartbeat: the next Heartbeat is due ``heartbeat.interval.ms`` after the last one was
  sent (after a failed one, ``retry.backoff.ms`` after the failure);
- session: ``session.timeout.ms`` after the last answered heartbeat (or the join); when
  it passes without an answer, the member takes the coordinator for lost (Java marks it
  unknown and rediscovers it);
- poll: ``max.poll.interval.ms`` after the application last polled; when it passes, the
  member leaves the group so the others can take its partitions (Java's
  "consumer poll timeout has expired").
"""

from __future__ import annotations

from kctl.engine.clock import NS_PER_MS

__all__ = ["Heartbeat"]


class Heartbeat:
    __slots__ = ("session_ns", "interval_ns", "poll_ns", "backoff_ns", "next_heartbeat_ns",
                 "session_deadline_ns", "poll_deadline_ns", "last_sent_ns", "last_received_ns")

    def __init__(self, *, session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 retry_backoff_ms: int, now_ns: int = 0) -> None:
        self.session_ns = session_timeout_ms * NS_PER_MS
        self.interval_ns = heartbeat_interval_ms * NS_PER_MS
        self.poll_ns = max_poll_interval_ms * NS_PER_MS
        self.backoff_ns = retry_backoff_ms * NS_PER_MS
        self.next_heartbeat_ns = now_ns + self.interval_ns
        self.session_deadline_ns = now_ns + self.session_ns
        self.poll_deadline_ns = now_ns + self.poll_ns
        self.last_sent_ns = -1
        self.last_received_ns = -1

    def sent(self, now_ns: int) -> None:
        self.last_sent_ns = now_ns
        self.next_heartbeat_ns = now_ns + self.interval_ns

    def received(self, now_ns: int) -> None:
        self.last_received_ns = now_ns
        self.session_deadline_ns = now_ns + self.session_ns

    def failed(self, now_ns: int) -> None:
        self.next_heartbeat_ns = now_ns + self.backoff_ns

    def polled(self, now_ns: int) -> None:
        self.poll_deadline_ns = now_ns + self.poll_ns

    def reset_timeouts(self, now_ns: int) -> None:
        """After a successful join: a fresh session and heartbeat interval."""
        self.session_deadline_ns = now_ns + self.session_ns
        self.next_heartbeat_ns = now_ns + self.interval_ns
        self.poll_deadline_ns = max(self.poll_deadline_ns, now_ns + self.poll_ns)

    def should_heartbeat(self, now_ns: int) -> bool:
        return now_ns >= self.next_heartbeat_ns

    def time_to_next_heartbeat_ns(self, now_ns: int) -> int:
        return max(0, self.next_heartbeat_ns - now_ns)

    def session_timeout_expired(self, now_ns: int) -> bool:
        return now_ns >= self.session_deadline_ns

    def poll_timeout_expired(self, now_ns: int) -> bool:
        return now_ns >= self.poll_deadline_ns
