"""CPU scheduling of a load run: a due worker runs before anything else on the host.

At a fixed rate a worker sleeps until its next record is due, and the record
leaves late by however long the kernel takes to run the worker once it wakes.
On a machine with few cores the CPUs are shared with the broker, with the run's
own parent process (merging reports, drawing the dashboard: a few milliseconds
at a time) and with kernel threads; measured at 1,000 records/s with two workers
on 2 cores (Linux 6.18, EEVDF), the woken worker waited behind whatever was
running for the rest of that task's time slice: 1 to 3 ms, a few times a second,
both workers at once when the parent merged their reports; a 10 ms window of
the schedule then carried 12 sends instead of at most 11.

Two changes, both without privilege:

- ``short_slice()``: a paced worker asks for the shortest time slice the kernel
  allows (``sched_setattr`` with ``sched_runtime``, EEVDF's custom slice, Linux
  6.12 or later). A woken task whose slice is shorter than the running task's
  preempts it, so the worker runs as soon as it is due. Older kernels accept
  the call and keep their own rule; elsewhere nothing is done.
- ``yield_to_load()``: the parent's bookkeeping thread lowers its own priority
  (nice +10), and the threads it starts (the dashboard's refresher, the
  consumers' report reader) inherit it, so it also yields the CPU over whole
  slices. Linux keeps the nice value per thread: the workers, started by other
  threads, keep theirs. Where it belongs to the whole process (not Linux),
  nothing is changed: every worker started afterwards would inherit it.

Measured together (perf sched, 2 workers): the waits behind the parent and the
broker are gone, and the largest lateness in a 6 s run fell from 1.2-3 ms to
0.25-1 ms when the host was quiet. What is left comes from below the guest's
scheduler, which neither change can reach: a kernel thread that cannot be
preempted (kdamond, about 1 ms every 510 ms) and, on a virtual machine, the host
holding a vCPU for a few milliseconds while the worker is runnable on it. How a
worker catches up after such a stall without a burst is load/schedule.py's
``CatchUp``. Benchmarks at full speed are unaffected: such a worker never sleeps
and is not given the short slice.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading

#: How much the bookkeeping threads yield: weight 110 against a worker's 1024.
BOOKKEEPING_NICE = 10
#: A paced worker's time slice: the shortest the kernel takes (0.1 ms).
WORKER_SLICE_NS = 100_000

#: sched_setattr(2)'s number per machine (it has no libc wrapper).
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
#: struct sched_attr, first version (48 bytes): size, policy, flags, nice, priority,
#: runtime, deadline, period.
_SCHED_ATTR = struct.Struct("=IIQiIQQQ")


def yield_to_load() -> bool:
    """Lowers the calling thread's CPU priority to ``BOOKKEEPING_NICE`` (never raises
    it). Call it only from a thread that will not start worker processes: they would
    inherit it. Returns whether the priority is now that low."""
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) < BOOKKEEPING_NICE:
            os.setpriority(os.PRIO_PROCESS, tid, BOOKKEEPING_NICE)
    except OSError:
        return False
    return True


def short_slice(slice_ns: int = WORKER_SLICE_NS) -> bool:
    """Asks for a ``slice_ns`` time slice for the calling thread (and the threads it
    starts), keeping its policy and nice value. Only for the ordinary time-sharing
    policies (a thread under a real-time or idle policy is left as it is). Returns
    whether the kernel took the request (a kernel before 6.12 takes it and ignores it)."""
    number = _SCHED_SETATTR.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if number is None:
        return False
    try:
        policy = os.sched_getscheduler(0)
        if policy not in (os.SCHED_OTHER, os.SCHED_BATCH):
            return False
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    attr = ctypes.create_string_buffer(
        _SCHED_ATTR.pack(_SCHED_ATTR.size, policy, 0, nice, 0, slice_ns, 0, 0), _SCHED_ATTR.size)
    return libc.syscall(number, 0, attr, 0) == 0
