"""load/priority.py: the bookkeeping thread yields, a paced worker gets a short slice,
and neither touches any other thread (Linux keeps both per thread)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from kctl.load.priority import BOOKKEEPING_NICE, WORKER_SLICE_NS, short_slice, yield_to_load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread scheduling is Linux's")


def _in_thread(fn):
    """Runs ``fn`` in a new thread; returns what it returned (the thread is gone after)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(10)
    assert not t.is_alive()
    return out[0]


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_bookkeeping_thread_yields_and_its_threads_inherit_it_but_not_the_others():
    main_before = _nice(threading.get_native_id())

    def bookkeeping():
        took = yield_to_load()
        child = _in_thread(lambda: _nice(threading.get_native_id()))   # e.g. the dashboard's refresher
        again = yield_to_load()       # never raises what is already lower
        return took, _nice(threading.get_native_id()), child, again

    took, own, child, again = _in_thread(bookkeeping)
    assert took and again
    assert own == child == max(BOOKKEEPING_NICE, main_before)
    assert _nice(threading.get_native_id()) == main_before   # the thread that starts workers keeps its own


def _slice_of(tid: int) -> int | None:
    """The thread's time slice as the kernel shows it (EEVDF kernels), else None."""
    for line in Path(f"/proc/self/task/{tid}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def test_short_slice_is_the_calling_threads_and_keeps_its_nice():
    main_slice = _slice_of(threading.get_native_id())

    def paced_worker():
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, 3)
        took = short_slice()
        return took, _slice_of(tid), _nice(tid), os.sched_getscheduler(0)

    took, slice_ns, nice, policy = _in_thread(paced_worker)
    if os.uname().machine not in ("x86_64", "aarch64"):
        assert not took
        return
    assert took
    assert nice == 3 and policy == os.SCHED_OTHER
    if slice_ns is not None:          # a kernel that shows slices: 6.12+ takes custom ones
        assert slice_ns == WORKER_SLICE_NS
    assert _slice_of(threading.get_native_id()) == main_slice


def test_short_slice_leaves_an_idle_policy_thread_alone():
    def idle():
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return short_slice(), os.sched_getscheduler(0)

    assert _in_thread(idle) == (False, os.SCHED_IDLE)
