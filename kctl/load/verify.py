"""``--verify``: read the produced range back and account for every acknowledged record.

How this works: workers report the ranges they had acknowledged, per
partition, as runs of ``(offset, count, first_seq)``. The verifier reads each
partition from the lowest acknowledged offset to the end of the highest run
and identifies each record by its ``kctl`` identity header (run tag, worker,
sequence; protocol/identity.py). Some records are acknowledged with no offset
(offset -1, as in the Java client): every send with acks=0, and a retry the broker
answered DUPLICATE_SEQUENCE_NUMBER (its first attempt was written, the answer
lost: Java's ``Sender.completeBatch`` completes it with offset -1). For them the
caller takes each partition's log end offset before the run (``since``,
``log_end_offsets``) and the verifier reads such a partition from there to the log
end after the run, and on while records of the run are still missing and the
partition keeps growing (acks=0 writes may still be on their way), until nothing
new came for ``EMPTY_WAIT_S``. Those records are matched by identity alone;
nothing is misplaced where no offset was promised. Per worker it keeps one byte
per sequence number (how many times it was expected, how many times it was found),
so memory is one byte per record, not an object. It reports:

- lost: acknowledged but not found;
- duplicated: found more than once (each extra copy counts);
- reordered: within a partition, a worker's record that follows one of that
  worker's later records (sequence numbers must rise with offsets);
- misplaced: found, but not at the offset its acknowledgement gave;
- aborted (transactional runs, read as read_committed): records of the run in aborted
  transactions, left out of found as a read_committed consumer leaves them out
  (``AbortedFilter``).

Speed: partitions are read in parallel by ``readers`` threads, each with its
own connections to the partitions' leaders, in large Fetches (``fetch_bytes``);
a batch is read through its header and its records' ``kctl`` headers only
(``identity.scan_batches``), turned into 64-bit words in one C-level step, and
each stretch of it that one acknowledged run covers (one worker's consecutive
sequence numbers at the offsets the acknowledgement gave) is checked as a whole
with a few array comparisons; only a stretch that fails is looked at record by
record.
"""

from __future__ import annotations

import bisect
import queue
import sys
import threading
import time
from array import array
from contextlib import closing
from collections.abc import Iterable, Mapping
from typing import Any

from kctl.engine import admin, setup_retry
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import EndOffsetsError, KctlError, RetriesExhaustedError
from kctl.protocol import messages, requests
from kctl.protocol.identity import CONTROL_ABORT, IDENTITY_SIZE, ScannedBatch, run_tag, scan_batches
from kctl.stats.summary import VerifyResult

__all__ = ["Verification", "VerifyResult", "log_end_offsets", "verify"]

#: Bytes asked for per Fetch (per partition and per response).
FETCH_BYTES = 32 * 1024 * 1024
#: Threads reading partitions in parallel.
READERS = 4
#: How long a partition may return nothing before the verifier stops waiting for
#: records not yet readable (acks=0 writes).
EMPTY_WAIT_S = 5.0
#: The open end of an acks=0 partition's range (read on while records are missing).
UNBOUNDED = 2**63 - 1

_LITTLE = sys.byteorder == "little"


class _Tally:
    """Per worker: expected and found counts per sequence number, one byte each."""

    def __init__(self) -> None:
        self.expected: dict[int, bytearray] = {}
        self.found: dict[int, bytearray] = {}

    @staticmethod
    def _array(table: dict[int, bytearray], worker: int, upto: int) -> bytearray:
        arr = table.get(worker)
        if arr is None:
            arr = table[worker] = bytearray()
        if upto > len(arr):
            arr.extend(bytes(max(upto - len(arr), len(arr) // 2)))
        return arr

    def expect_run(self, worker: int, first_seq: int, count: int) -> None:
        arr = self._array(self.expected, worker, first_seq + count)
        seg = arr[first_seq:first_seq + count]
        if seg.count(0) == count:
            arr[first_seq:first_seq + count] = b"\x01" * count
        else:
            for s in range(first_seq, first_seq + count):
                if arr[s] < 255:
                    arr[s] += 1

    def find(self, worker: int, seq: int) -> int:
        arr = self._array(self.found, worker, seq + 1)
        if arr[seq] < 255:
            arr[seq] += 1
        return arr[seq]

    def expected_at(self, worker: int, seq: int) -> int:
        arr = self.expected.get(worker)
        return arr[seq] if arr is not None and seq < len(arr) else 0

    def expected_all(self, worker: int, first_seq: int, count: int) -> bool:
        """Every one of the worker's sequences ``first_seq`` .. + ``count`` was acknowledged."""
        arr = self.expected.get(worker)
        if arr is None or first_seq + count > len(arr):
            return False
        return arr[first_seq:first_seq + count].count(0) == 0

    def find_run(self, worker: int, first_seq: int, count: int) -> bool:
        """Marks a run found; False (nothing marked) when any of it was found before."""
        arr = self._array(self.found, worker, first_seq + count)
        if arr[first_seq:first_seq + count].count(0) != count:
            return False
        arr[first_seq:first_seq + count] = b"\x01" * count
        return True


class _Placement:
    """Where the acknowledgements put each worker's records in one partition."""

    def __init__(self, runs: list[tuple[int, int, int, int]]) -> None:
        runs.sort()
        self.runs = runs                    # (offset, count, worker, first_seq)
        self.starts = [r[0] for r in runs]

    def at(self, offset: int) -> tuple[int, int, int, int] | None:
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0:
            return None
        run = self.runs[i]
        return run if offset < run[0] + run[1] else None


def _words(blob: bytes) -> array:
    """Identities as 64-bit words, three per record: run tag and worker, sequence,
    intended time (one C-level conversion, no object per record)."""
    words = array("Q", blob)
    if _LITTLE:
        words.byteswap()
    return words


class _Checker:
    """The single-threaded accounting the reader threads feed, batch by batch."""

    def __init__(self, tag: bytes, tally: _Tally, max_examples: int) -> None:
        self.tag = int.from_bytes(tag, "big")
        self.tally = tally
        self.max_examples = max_examples
        self.found = self.duplicated = self.reordered = self.misplaced = 0
        #: copies read of the run's records never acknowledged (failed or abandoned, yet
        #: written): apart from found, never duplicated, reordered or misplaced
        self.unacked_copies = 0
        self.dup_examples: list[tuple[int, int]] = []
        self.per_partition: dict[int, dict[str, int]] = {}
        self._last_seq: dict[int, dict[int, int]] = {}

    def add(self, partition: int, lo: int, hi: int, place: _Placement, b: ScannedBatch) -> None:
        stats = self.per_partition.setdefault(partition, _partition_stats())
        last_seq = self._last_seq.setdefault(partition, {})
        if b.identities is None:
            for off, ident in b.records:
                if lo <= off < hi and ident is not None and \
                        int.from_bytes(ident.run_tag, "big") == self.tag:
                    self._one(stats, last_seq, place, off, ident.worker, ident.sequence)
            return
        first = max(lo, b.base_offset)
        last = min(hi, b.next_offset)
        if last <= first:
            return
        words = _words(b.identities[(first - b.base_offset) * IDENTITY_SIZE:
                                    (last - b.base_offset) * IDENTITY_SIZE])
        tag_workers = words[0::3]
        seqs = words[1::3]
        i, n = 0, last - first
        while i < n:
            # Check one acknowledged run's stretch of the batch as a whole: our run tag,
            # the run's worker, its consecutive sequences, in order, none seen before.
            off = first + i
            run = place.at(off)
            k = n - i if run is None else min(n - i, run[0] + run[1] - off)
            if run is None:
                # No offset promised here (acks=0, or a gap): the stretch is one
                # worker's if its first record says so.
                worker, s0 = tag_workers[i] & 0xFFFFFFFF, seqs[i]
            else:
                worker, s0 = run[2], run[3] + off - run[0]
            if self._stretch(stats, last_seq, worker, s0, k, tag_workers[i:i + k], seqs[i:i + k]):
                i += k
                continue
            for j in range(i, i + k):
                tw = tag_workers[j]
                if tw >> 32 == self.tag:
                    self._one(stats, last_seq, place, first + j, tw & 0xFFFFFFFF, seqs[j])
            i += k

    def _stretch(self, stats: dict[str, int], last_seq: dict[int, int], worker: int, s0: int,
                 k: int, tag_workers: array, seqs: array) -> bool:
        if (tag_workers.count((self.tag << 32) | worker) != k or s0 < last_seq.get(worker, -1)
                or seqs != array("Q", range(s0, s0 + k)) or not self.tally.expected_all(worker, s0, k)
                or not self.tally.find_run(worker, s0, k)):
            return False
        last_seq[worker] = s0 + k - 1
        self.found += k
        stats["found"] += k
        return True

    def _one(self, stats: dict[str, int], last_seq: dict[int, int], place: _Placement,
             offset: int, worker: int, seq: int) -> None:
        if not self.tally.expected_at(worker, seq):
            # Reported failed or abandoned (or never acknowledged), yet in the log.
            self.tally.find(worker, seq)
            self.unacked_copies += 1
            return
        n = self.tally.find(worker, seq)
        self.found += 1
        stats["found"] += 1
        if n > 1:
            self.duplicated += 1
            if len(self.dup_examples) < self.max_examples:
                self.dup_examples.append((worker, seq))
        prev = last_seq.get(worker, -1)
        if seq < prev:
            self.reordered += 1
            stats["reordered"] += 1
        last_seq[worker] = max(seq, prev)
        run = place.at(offset)
        if run is not None and (run[2], run[3] + offset - run[0]) != (worker, seq):
            self.misplaced += 1


def _partition_stats() -> dict[str, int]:
    """One partition's figures; ``expected`` and ``lost`` are filled in by ``Verification.result``."""
    return {"expected": 0, "found": 0, "lost": 0, "reordered": 0}


def _leaders(md: admin.ClusterMetadata, topic: str, address: str) -> tuple[dict[int, str], Any]:
    """Each partition's leader's address, and the topic's id, from one Metadata answer."""
    info = md.topics.get(topic)
    if info is None or info.error:
        raise KctlError(f"--verify: topic {topic!r} on {address}: "
                        f"{info.error if info else 'not found'}")
    brokers = {b.node_id: b.address for b in md.brokers}
    return {p.partition: brokers.get(p.leader, address) for p in info.partitions}, info.topic_id


def _run_records(batches: Iterable[ScannedBatch], tag: bytes, lo: int) -> int:
    """How many records at offsets ``lo`` and on carry the run tag ``tag``."""
    tag32 = int.from_bytes(tag, sys.byteorder)
    n = 0
    for b in batches:
        skip = max(0, lo - b.base_offset)
        if b.identities is not None:
            # The tag is the first of each identity's six 32-bit words.
            n += array("I", b.identities[skip * IDENTITY_SIZE:])[0::6].count(tag32)
        else:
            n += sum(1 for off, ident in b.records if off >= lo and ident is not None and ident.run_tag == tag)
    return n


class AbortedFilter:
    """What a read_committed consumer hands out of one partition, fed its batches in
    offset order: the batches of aborted transactions are dropped. The Fetch answer's
    ``aborted_transactions`` say which (as Java's consumer uses them: a listed producer's
    batches from the listed first offset on, up to its ABORT marker). A broker that
    answers with no such list (Tansu) still writes the COMMIT/ABORT control markers, so
    a transactional batch below ``hi`` is held until its producer's marker decides it.
    ``aborted``: the run's records (``tag``) so dropped."""

    def __init__(self, tag: bytes, hi: int) -> None:
        self.tag = tag
        self.hi = hi
        self.aborted = 0
        self._held: dict[int, list[ScannedBatch]] = {}
        self._listed: dict[int, list[int]] = {}        # producer id -> first offsets (sorted)
        self._seen: set[tuple[int, int]] = set()

    @property
    def undecided(self) -> bool:
        """Batches held for a marker not read yet."""
        return bool(self._held)

    def feed(self, batches: Iterable[ScannedBatch],
             aborted_transactions: Iterable[tuple[int, int]] = ()) -> list[ScannedBatch]:
        """The batches to count, in order (held ones come out when their commit marker does)."""
        for pid, first in aborted_transactions:
            if (pid, first) not in self._seen:
                self._seen.add((pid, first))
                bisect.insort(self._listed.setdefault(pid, []), first)
        out: list[ScannedBatch] = []
        for b in batches:
            pid = b.producer_id
            if b.control is not None:
                held = self._held.pop(pid, [])
                if b.control == CONTROL_ABORT:
                    self.aborted += _run_records(held, self.tag, 0)
                    listed = self._listed.get(pid)
                    if listed and listed[0] <= b.base_offset:
                        listed.pop(0)
                else:
                    out.extend(held)
                continue
            if not b.transactional:
                out.append(b)
                continue
            listed = self._listed.get(pid)
            if listed and listed[0] <= b.base_offset:
                self.aborted += _run_records((b,), self.tag, 0)   # listed aborted: dropped
            elif b.base_offset < self.hi:
                self._held.setdefault(pid, []).append(b)
            else:
                out.append(b)    # past the range (not counted): no need to wait for its marker
        return out

    def rest(self) -> list[ScannedBatch]:
        """The batches still held at the end (no marker read for them): counted as read."""
        out = [b for held in self._held.values() for b in held]
        self._held.clear()
        return sorted(out, key=lambda b: b.base_offset)


def _read_partitions(jobs: queue.Queue, out: queue.Queue, topic: str, topic_id: Any,
                     leaders: dict[int, str], client_for: Any, fetch_bytes: int,
                     isolation_level: int = requests.READ_UNCOMMITTED, tag: bytes = b"",
                     retry: SetupRetry = SetupRetry()) -> None:
    """A reader thread: takes (partition, lo, hi, want) jobs; puts (partition, batches)
    chunks, then (partition, None) when the partition is done, or (partition, error).
    read_committed: the batches of aborted transactions are left out (``AbortedFilter``;
    it reads on past ``hi`` until the markers of the transactions it holds), and
    (partition, ("aborted", n)) says how many of the run's records that left out.
    ``want`` (records acknowledged without an offset there, None otherwise): the run's
    records acknowledged to the partition; past ``hi`` it reads on while fewer of the
    run's records (``tag``) were read and the partition still grows. ``client_for(address)``:
    a connection, not yet open; a Fetch whose connection breaks is asked again from the
    same offset over a new one, for at most ``retry.timeout_ms`` (as a consumer reconnects)."""
    clients: dict[str, BlockingClient] = {}
    try:
        while True:
            try:
                partition, lo, hi, want = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                address = leaders[partition]
                client = clients.get(address)
                if client is None:
                    client = clients[address] = client_for(address)
                offset = lo
                idle_since = None
                got = 0
                found_at = time.monotonic()   # the last time a record of the run was read
                txns = AbortedFilter(tag, hi) if isolation_level == requests.READ_COMMITTED else None
                while offset < hi or (want is not None and got < want) or \
                        (txns is not None and txns.undecided):
                    if offset >= hi and time.monotonic() - found_at >= EMPTY_WAIT_S:
                        break   # past the end: others' records only, for a while (the rest is lost)
                    raw = setup_retry.call(
                        client, lambda c, at=offset: admin.fetch_raw(
                            c, topic, partition, at, max_bytes=fetch_bytes, topic_id=topic_id,
                            isolation_level=isolation_level),
                        retry, what=f"Fetch of partition {partition} at offset {offset}")
                    batches, _ = scan_batches(raw.records)
                    batches = [b for b in batches if b.next_offset > offset]
                    if not batches:
                        # Nothing more yet: acks=0 records may still be on their way.
                        now = time.monotonic()
                        idle_since = idle_since or now
                        if now - idle_since >= EMPTY_WAIT_S or (want is None and raw.high_watermark >= hi):
                            break
                        time.sleep(0.01)
                        continue
                    idle_since = None
                    if want is not None:
                        n = _run_records(batches, tag, offset)
                        got += n
                        if n:
                            found_at = time.monotonic()
                    offset = batches[-1].next_offset
                    if txns is not None:
                        batches = txns.feed(batches, raw.aborted_transactions)
                    if batches:
                        out.put((partition, batches))
                if txns is not None:
                    if txns.undecided:
                        out.put((partition, txns.rest()))
                    out.put((partition, ("aborted", txns.aborted)))
                out.put((partition, None))
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                out.put((partition, e))
    finally:
        for c in clients.values():
            c.close()


class Verification:
    """The accounting of one verify, fed batch by batch: by ``verify`` (records read back
    from the broker) or by the consumer side (what ``kctl consume`` / ``produce --consume``
    handed out). ``acked``: worker -> partition -> runs of (offset, count, first_seq).
    ``since``: partition -> its log end offset before the run. Records acknowledged
    without an offset (acks=0; a retry the broker answered DUPLICATE_SEQUENCE_NUMBER,
    as the Java producer completes it with offset -1) are looked for from there on, so
    such a partition's range runs from ``since`` to the log end, whatever offsets its
    other records were acknowledged at."""

    def __init__(self, run_id: str, acked: Mapping[int, Mapping[int, Iterable[tuple[int, int, int]]]], *,
                 max_examples: int = 10, since: Mapping[int, int] | None = None,
                 look_for_unacked: bool = False) -> None:
        """``look_for_unacked`` (the run reported records failed or abandoned): every
        partition of ``since`` is read from there to its log end after the run, so the
        run's records that were written although never acknowledged are counted
        (``VerifyResult.written_unacked``), apart from the verdict."""
        self.tally = _Tally()
        where: dict[int, list[tuple[int, int, int, int]]] = {}
        self.ranges: dict[int, tuple[int, int]] = {}
        self.expected = 0
        #: partition -> records acknowledged there (with or without an offset)
        self.acked_in: dict[int, int] = {}
        #: partition -> records acknowledged there without an offset
        self.unplaced: dict[int, int] = {}
        #: partition -> the acknowledged runs as (worker, first_seq, count): per-partition lost
        self._runs: dict[int, list[tuple[int, int, int]]] = {}
        for worker, parts in acked.items():
            for partition, runs in parts.items():
                placed = where.setdefault(partition, [])
                mine = self._runs.setdefault(partition, [])
                for offset, count, first_seq in runs:
                    self.tally.expect_run(worker, first_seq, count)
                    self.expected += count
                    self.acked_in[partition] = self.acked_in.get(partition, 0) + count
                    mine.append((worker, first_seq, count))
                    if offset < 0:
                        # acknowledged without an offset: found anywhere after ``since`` is fine
                        self.unplaced[partition] = self.unplaced.get(partition, 0) + count
                        continue
                    lo, hi = self.ranges.get(partition, (offset, offset + count))
                    self.ranges[partition] = (min(lo, offset), max(hi, offset + count))
                    placed.append((offset, count, worker, first_seq))
        for partition in self.unplaced:
            if since is not None and partition in since:
                self.ranges[partition] = (since[partition], UNBOUNDED)    # read on to the end
            else:
                self.ranges.pop(partition, None)     # nowhere to look for them: verify() refuses
        #: partitions read from ``since`` to the log end after the run for records never
        #: acknowledged (besides ``unplaced``'s)
        self.to_end: set[int] = set()
        if look_for_unacked and since is not None:
            for partition, start in since.items():
                if partition not in self.unplaced:
                    self.to_end.add(partition)
                    self.ranges[partition] = (start, UNBOUNDED)
        self.placements = {p: _Placement(runs) for p, runs in where.items()}
        self.max_examples = max_examples
        self.checker = _Checker(run_tag(run_id), self.tally, max_examples)
        #: the run's records read in aborted transactions (left out; read_committed)
        self.aborted = 0

    def add(self, partition: int, batches: Iterable[ScannedBatch]) -> None:
        """Records of ``partition`` as found; only offsets inside the acknowledged range count."""
        lo, hi = self.ranges.get(partition, (0, 0))
        place = self.placements.get(partition) or _Placement([])
        for b in batches:
            self.checker.add(partition, lo, hi, place, b)

    def add_aborted(self, partition: int, count: int) -> None:
        """``count`` records of the run read in ``partition`` belong to aborted
        transactions: left out, as a read_committed consumer leaves them out."""
        stats = self.checker.per_partition.setdefault(partition, _partition_stats())
        stats["aborted"] = stats.get("aborted", 0) + count
        self.aborted += count

    def result(self, read_s: float) -> VerifyResult:
        """The verdict. Per partition: ``expected`` the records acknowledged there, ``found``
        the run's records read there, ``lost`` those acknowledged there and found nowhere."""
        checker, tally, max_examples = self.checker, self.tally, self.max_examples
        lost = 0
        lost_examples: list[tuple[int, int]] = []
        for worker, exp in tally.expected.items():
            got = tally.found.get(worker, bytearray())
            if len(got) < len(exp):
                got = got + bytes(len(exp) - len(got))
            missing = [s for s in _missing(exp, got)]
            lost += len(missing)
            for s in missing[:max(0, max_examples - len(lost_examples))]:
                lost_examples.append((worker, s))
        for partition, count in self.acked_in.items():
            stats = checker.per_partition.setdefault(partition, _partition_stats())
            stats["expected"] = count
            stats["lost"] = sum(_unfound(tally.found.get(worker), first_seq, n)
                                for worker, first_seq, n in self._runs[partition])
        written = sum(_unacked_found(tally.expected.get(worker), got) for worker, got in tally.found.items()) \
            if checker.unacked_copies else 0
        return VerifyResult(self.expected, checker.found, lost, checker.duplicated, checker.reordered,
                            checker.misplaced, tuple(lost_examples), tuple(checker.dup_examples),
                            dict(sorted(checker.per_partition.items())), read_s, self.aborted, written)


def _unacked_found(expected: bytearray | None, found: bytearray) -> int:
    """How many of a worker's sequences were found but never expected (acknowledged)."""
    n = len(found)
    exp = bytes(expected[:n]) if expected is not None else b""
    exp += bytes(n - len(exp))
    flags = bytes(range(256))[:1] + b"\x01" * 255      # nonzero -> 1
    zero = b"\x01" + b"\x00" * 255                       # zero -> 1
    hit = int.from_bytes(bytes(found).translate(flags), "little") & \
        int.from_bytes(exp.translate(zero), "little")
    return hit.bit_count()


def _unfound(found: bytearray | None, first_seq: int, count: int) -> int:
    """How many of a worker's sequences ``first_seq`` .. ``first_seq + count - 1`` were never found."""
    if found is None:
        return count
    seg = found[first_seq:first_seq + count]
    return seg.count(0) + count - len(seg)


def log_end_offsets(bootstrap: str, topic: str, *, security: Any = None,
                    retry: SetupRetry = SetupRetry()) -> dict[int, int]:
    """Every partition's log end offset, each asked of its leader (``admin.log_end_offsets``):
    where the records acknowledged without an offset start (``verify``'s ``since``), taken
    before the run. Asked again (after a fresh Metadata; over a new connection when one
    broke) while the errors may pass, for at most ``retry.timeout_ms``. A partition whose
    end offset stays unknown fails it: its records could not be looked for."""
    first = bootstrap.split(",")[0].strip()
    try:
        with closing(_admin_client(first, security)) as client:
            return setup_retry.call(
                client, lambda c: admin.log_end_offsets(c, topic, client_for=lambda a: _admin_client(a, security)),
                retry, what=f"--verify: the log end offsets of {topic!r} before the run")
    except (EndOffsetsError, RetriesExhaustedError) as e:
        raise KctlError(f"--verify: the log end offset of {topic!r} before the run is unknown "
                        f"({_reasons(e)}): records acknowledged without an offset "
                        "could not be looked for") from None


def _reasons(e: EndOffsetsError | RetriesExhaustedError) -> str:
    """Why end offsets are unknown: the partitions and their errors, and how long they
    were asked when the retries ran out."""
    if isinstance(e, RetriesExhaustedError):
        if not isinstance(e.last, EndOffsetsError):
            return str(e)
        return f"{e.last.describe_errors()}; asked {e.attempts} time(s) for {e.bound}"
    return e.describe_errors()


def _admin_client(address: str, security: Any, timeout_s: float | None = None) -> BlockingClient:
    if timeout_s is None:
        return BlockingClient(address, client_id="kctl-verify", security=security)
    return BlockingClient(address, client_id="kctl-verify", security=security, timeout_s=timeout_s)


def verify(bootstrap: str, topic: str, run_id: str,
           acked: Mapping[int, Mapping[int, Iterable[tuple[int, int, int]]]], *,
           security: Any = None, readers: int = READERS, fetch_bytes: int = FETCH_BYTES,
           max_examples: int = 10, read_committed: bool = False,
           since: Mapping[int, int] | None = None, retry: SetupRetry = SetupRetry(),
           answer_timeout_s: float | None = None, look_for_unacked: bool = False) -> VerifyResult:
    """``acked``: worker -> partition -> runs of (offset, count, first_seq).
    ``read_committed``: read as a read_committed consumer (a transactional run): up to
    the last stable offset.
    ``since``: ``log_end_offsets`` taken before the run; records acknowledged without an
    offset (acks=0; a retry answered DUPLICATE_SEQUENCE_NUMBER) are read from there to the
    log end after the run (and on while some are missing and the log grows).
    ``bootstrap``: any broker's ``host:port`` (the first of a list is used).
    ``retry``: how long a request whose connection broke is asked again over a new one
    (Metadata, ListOffsets, each Fetch), and end offsets whose errors may pass asked again
    (engine/setup_retry.py). ``answer_timeout_s``: how long one request waits for its answer
    (None: the blocking client's default; after a stop, the stop grace).
    ``look_for_unacked``: the run reported records failed or abandoned; every partition is
    read from ``since`` to its log end after the run and the run's records found there that
    were never acknowledged are counted apart (``written_unacked``): not expected, so
    neither found nor lost."""
    started = time.monotonic()
    v = Verification(run_id, acked, max_examples=max_examples, since=since,
                     look_for_unacked=look_for_unacked)
    ranges = v.ranges
    blind = sorted(p for p in v.unplaced if p not in ranges)
    if blind:
        raise KctlError(f"--verify: records of partition(s) {', '.join(map(str, blind))} of {topic!r} "
                        "were acknowledged without an offset (acks=0, or a retry answered "
                        "DUPLICATE_SEQUENCE_NUMBER) and the log end offsets "
                        "before the run are unknown: nothing to read them back from")

    if ranges:
        first = bootstrap.split(",")[0].strip()

        def look_up(client: BlockingClient) -> tuple[dict[int, str], Any, int, dict[int, int]]:
            md = admin.fetch_metadata(client, [topic])
            leaders, tid = _leaders(md, topic, client.address)
            version = client.version_for(messages.message_class("FetchRequest")())
            # Where records were acknowledged without an offset: read to each partition's
            # log end after the run (its leader's answer, from the Metadata just taken; an
            # error that may pass asks both again, setup_retry).
            to_end = sorted(set(v.unplaced) | v.to_end)
            ends = admin.log_end_offsets(client, topic, to_end, metadata=md,
                                         client_for=lambda a: _admin_client(a, security, answer_timeout_s)) \
                if to_end else {}
            return leaders, tid, version, ends

        try:
            with closing(_admin_client(first, security, answer_timeout_s)) as client:
                leaders, tid, version, ends = setup_retry.call(
                    client, look_up, retry, what=f"--verify: Metadata of {topic!r}")
        except (EndOffsetsError, RetriesExhaustedError) as e:
            raise KctlError(f"--verify: the log end offset of {topic!r} after the run is unknown "
                            f"({_reasons(e)}): the records acknowledged without an offset "
                            "there cannot be read back to its end") from None
        jobs: queue.Queue = queue.Queue()
        for partition, (lo, hi) in sorted(ranges.items()):
            if partition in v.unplaced:
                jobs.put((partition, lo, ends[partition], v.acked_in[partition]))
            elif partition in v.to_end:
                jobs.put((partition, lo, ends[partition], None))
            else:
                jobs.put((partition, lo, hi, None))
        out: queue.Queue = queue.Queue()
        by_id = tid if requests.names_topics_by_id(version) else None
        threads = [threading.Thread(target=_read_partitions, name=f"kctl-verify-{i}", daemon=True,
                                    args=(jobs, out, topic, by_id,
                                          leaders, lambda a: _admin_client(a, security, answer_timeout_s), fetch_bytes,
                                          requests.READ_COMMITTED if read_committed
                                          else requests.READ_UNCOMMITTED, run_tag(run_id), retry))
                   for i in range(max(1, min(readers, len(ranges))))]
        for t in threads:
            t.start()
        pending = set(ranges)
        error: BaseException | None = None
        while pending:
            partition, item = out.get()
            if item is None:
                pending.discard(partition)
            elif isinstance(item, BaseException):
                pending.discard(partition)
                error = error or item
            elif isinstance(item, tuple):
                v.add_aborted(partition, item[1])
            else:
                v.add(partition, item)
        for t in threads:
            t.join()
        if error is not None:
            raise KctlError(f"--verify could not read {topic!r}: {error}") from None
    return v.result(time.monotonic() - started)


def _missing(expected: bytearray, found: bytes | bytearray) -> list[int]:
    """Sequence numbers expected at least once and found never."""
    out = []
    n = len(expected)
    # Walk in chunks: a chunk with no expected-but-missing entry is skipped whole.
    step = 4096
    for start in range(0, n, step):
        e = expected[start:start + step]
        f = found[start:start + step]
        if e.count(0) == len(e):
            continue
        if f.count(0) == 0:
            continue
        out.extend(start + i for i, (x, y) in enumerate(zip(e, f)) if x and not y)
    return out
