"""ConsumeRun's stop: a consumer is given its whole close bound before it is killed."""

import pytest

from kctl.consumer_config import ConsumerConfig
from kctl.engine.consumer import close_bound_s
from kctl.load.consume_run import EXIT_MARGIN_S, ConsumeRun, ConsumeSpec


class _Stuck:
    """A consumer process that never exits by itself: records how long it was waited for."""

    def __init__(self):
        self.waits = []
        self.killed = False

    def join(self, timeout=None):
        self.waits.append(timeout)

    def is_alive(self):
        return not self.killed

    def kill(self):
        self.killed = True


@pytest.mark.parametrize("request_timeout_ms, bound_s", [("30000", 30.0), ("8000", 8.0), ("60000", 30.0)])
def test_a_stopped_consumer_is_killed_only_after_its_close_bound(request_timeout_ms, bound_s):
    """The audit's exit 15.4 s after Ctrl-C: the parent killed its consumers 15 s after the
    stop while their close could take 30 s, so a failed commit on close was never reported.
    The wait is now the consumer's own close bound (min(30 s, request.timeout.ms), Java's
    close timer) plus the margin for its final report and exit."""
    config = ConsumerConfig.from_properties({"bootstrap.servers": "127.0.0.1:9", "group.id": "g",
                                             "request.timeout.ms": request_timeout_ms})
    assert close_bound_s(config) == bound_s
    run = ConsumeRun(ConsumeSpec(topic="t", config=config, partitions=(0, 1), consumers=2, group=True),
                     config_for_summary={})
    procs = [_Stuck(), _Stuck()]
    run._procs = procs
    run._join()
    assert run._stop.is_set()
    first = procs[0].waits[0]
    assert bound_s + EXIT_MARGIN_S - 0.5 <= first <= bound_s + EXIT_MARGIN_S
    assert procs[1].waits[0] <= first        # one common deadline, not one per process
    assert all(p.killed for p in procs)
