"""``kctl decode``: Kafka frames out of pcap/pcapng captures (or one hex frame on stdin)."""

from __future__ import annotations

import binascii
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from kctl.errors import ConfigError, RemoteProtocolError
from kctl.inspect import report
from kctl.inspect.legs import LEG_CHOICES, read_legs
from kctl.inspect.session import (
    DEFAULT_BROKER_PORT, CaptureNotice, DecodedFrame, decode_files, decode_hex_frame,
    guess_broker_ports,
)
from kctl.inspect.summary import CaptureSummary
from kctl.inspect.traffic import broker_ports, no_kafka_traffic, tcp_port_bytes
from kctl.protocol.compression import DEFAULT_RATIO, DecompressionBudget
from kctl.protocol.schema import API_BY_KEY, API_BY_NAME
from kctl.ui.console import stderr_console, stdout_console

def _api_keys(names: list[str]) -> set[int]:
    lower = {n.lower(): a.api_key for n, a in API_BY_NAME.items()}
    keys = set()
    for n in names:
        if n.lstrip("-").isdigit():
            if int(n) not in API_BY_KEY:
                raise ConfigError(f"--api {n!r}: no API has key {int(n)} in kctl's schema "
                                  f"(keys {min(API_BY_KEY)}-{max(API_BY_KEY)}, with gaps; "
                                  "e.g. Produce, Fetch, 0)")
            keys.add(int(n))
        elif n.lower() in lower:
            keys.add(lower[n.lower()])
        else:
            raise ConfigError(f"--api {n!r}: not an API name or key (e.g. Produce, Fetch, 0)")
    return keys


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one file is read: its broker ports, the pcapng interfaces to read (None: all),
    and whether ``--port auto`` found ports (False: it fell back to Kafka's default)."""
    path: Path
    ports: frozenset[int]
    interfaces: frozenset[int] | None
    auto_found: bool


def _plan(path: Path, port: list[str], leg: str | None) -> _Plan:
    """One file's plan. A kctl inspect capture names its legs and their broker ports
    (``inspect/legs.py``): one leg is read (the client leg unless ``--leg``), and ``auto``
    takes that leg's ports."""
    found = True        # stays so unless auto falls back

    def guess(known: Iterable[int] = ()) -> set[int]:
        """``auto``: the leg's recorded ports when it has some, else guessed from the traffic."""
        nonlocal found
        known = set(known)
        if known:
            return known
        ports = guess_broker_ports([path], default=None)
        found = bool(ports)
        return ports or {DEFAULT_BROKER_PORT}
    # A pipe read as it arrives (stdin with explicit ports) cannot be read twice.
    legs = read_legs(path) if path.is_file() else None
    if legs is None:
        if leg is not None:
            raise ConfigError(f"--leg {leg}: {path} is not a kctl inspect capture (it names no "
                              "legs); leave --leg out to read every packet")
        return _Plan(path, frozenset(broker_ports(port, guess)), None, found)
    chosen = LEG_CHOICES[leg or "client"]
    ports = broker_ports(port, lambda: guess(legs.ports_for(chosen)))
    return _Plan(path, frozenset(ports), legs.interfaces_for(chosen), found)


def decode(
    files: list[Path] = typer.Argument(None, help="pcap or pcapng capture files; '-' reads one from stdin "
                                                  "(tcpdump -w - | kctl decode -)."),
    port: list[str] = typer.Option(["auto"], "--port", "-p",
                                   help="Broker port (repeatable); 'auto': from a kctl capture's "
                                        "legs, else guessed from the traffic."),
    leg: str = typer.Option(None, "--leg", help="kctl inspect captures: client (default), "
                            "upstream or both legs of the proxy."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per frame (docs/decode-json.md)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Full decoded tree of every frame: the fields of its API version only; a consumer group's JoinGroup subscriptions and SyncGroup assignments decoded."),
    records: bool = typer.Option(False, "--records", help="Print each record of Produce requests and Fetch responses; control records "
                                 "(transaction COMMIT/ABORT markers) are left out, as consumers "
                                 "and kcat do (--summary counts them); a record set or frame whose "
                                 "records cannot be read is named in a '#' line on stderr."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f",
                                      help="Record format with --records (kcat-like: %t %p %o %k %s %K %S %T %h %%; "
                                           f"default {report.DEFAULT_RECORD_FORMAT!r}); another %-letter is refused."),
    api: list[str] = typer.Option([], "--api", help="Only these APIs (name or key, repeatable; a key kctl's schema does not know is refused); with --hex: the response's API."),
    topic: list[str] = typer.Option([], "--topic", "-t", help="Only frames that mention this topic (repeatable; a topic id is matched by the name the capture's Metadata gave it)."),
    client_id: list[str] = typer.Option([], "--client-id", help="Only this client id (repeatable)."),
    conn: list[str] = typer.Option([], "--conn", help="Only connections whose 'client<->broker' text contains this (repeatable)."),
    errors_only: bool = typer.Option(False, "--errors-only", help="Only frames with non-zero error codes or decode errors."),
    summary: bool = typer.Option(False, "--summary", help="Totals per API, topic/partition, errors per API and throttling."),
    hex_in: bool = typer.Option(False, "--hex", help="Decode one frame given as hex on stdin."),
    with_prefix: bool = typer.Option(
        False, "--size-prefix", show_default=False,
        help="With --hex: the hex begins with the frame's 4-byte size (which must match the "
             "bytes after it)."),
    without_prefix: bool = typer.Option(
        False, "--no-size-prefix", show_default=False,
        help="With --hex: the hex does not begin with the frame's size. Default (neither): hex whose first 4 bytes equal the "
             "length of the rest is read both ways (a response whose correlation id is its "
             "length minus 4 looks the same) and the reading that decodes wholly is shown "
             "(the size-prefixed one when both do, with a note on stderr); other hex has no prefix."),
    api_version: int = typer.Option(None, "--api-version", help="With --hex: the API version of the response's request."),
    old_version: bool = typer.Option(False, "--version", hidden=True),
    show_secrets: bool = typer.Option(False, "--show-secrets", help="Show SaslAuthenticate credentials (redacted by default)."),
    max_pending_mb: int = typer.Option(4, "--max-pending-mb", min=1,
                                       help="Out-of-order bytes held per stream before a gap is declared."),
    max_decompress_ratio: int = typer.Option(
        DEFAULT_RATIO, "--max-decompress-ratio", min=1,
        help="Decompressed bytes allowed per captured byte, per frame and per run (beyond "
             "16 MiB): records of compressed batches past it are not decoded."),
) -> None:
    """Decode Kafka frames from pcap/pcapng captures (tcpdump, Wireshark, kctl inspect)."""
    if old_version:
        raise ConfigError("decode --version N is now --api-version N (the API version of the "
                          "response's request, with --hex); 'kctl --version' prints kctl's version")
    out = stdout_console(highlight=False)
    err = stderr_console(highlight=False)
    api_keys = _api_keys(api)
    if with_prefix and without_prefix:
        raise ConfigError("give --size-prefix or --no-size-prefix, not both")
    size_prefix = True if with_prefix else False if without_prefix else None
    if fmt is not None:
        if not records:
            raise ConfigError("--format/-f formats the records --records prints: add --records")
        report.check_record_format(fmt, "--format")
    fmt = fmt if fmt is not None else report.DEFAULT_RECORD_FORMAT
    if records and summary:
        raise ConfigError("give --records (each record) or --summary (the totals), not both")
    if hex_in and files:
        raise ConfigError("--hex decodes one frame read as hex from stdin: give no capture files "
                          "with it (or drop --hex to decode the captures)")

    if hex_in:
        _decode_hex(api_keys, api_version, json_out, verbose, records, fmt, out, err,
                    size_prefix, show_secrets)
        return
    if size_prefix is not None:
        raise ConfigError("--size-prefix/--no-size-prefix go with --hex (frames in a capture "
                          "always have their size prefix)")
    if api_version is not None:
        raise ConfigError("--api-version goes with --hex (a capture's responses take the API "
                          "version from their request)")
    if not files:
        raise ConfigError("give capture files to decode ('-' for stdin; or --hex with a frame on stdin)")
    if leg is not None and leg not in LEG_CHOICES:
        raise ConfigError(f"--leg {leg!r}: expected client, upstream or both")
    files, spool = _stdin_as_file(files, port)

    def shown(text: str) -> str:
        """Messages name stdin, not the temporary file kctl keeps it in."""
        return text.replace(spool, "stdin") if spool else text
    plans = [_plan(path, port, leg) for path in files]
    client_ids = set(client_id)
    topics = set(topic)
    summ = CaptureSummary() if summary else None
    failures: list[CaptureNotice] = []
    found = 0

    budget = DecompressionBudget(ratio=max_decompress_ratio)   # one for the whole run
    stream_notices = 0
    for item in (it for plan in plans
                 for it in decode_files([plan.path], plan.ports,
                                        max_pending_bytes=max_pending_mb << 20,
                                        show_secrets=show_secrets, interfaces=plan.interfaces,
                                        budget=budget)):
        if isinstance(item, CaptureNotice):
            if summ is not None:
                summ.add(item)
            if item.kind == "error":
                failures.append(item)
                if len(failures) == 1:
                    continue        # the run's last line, kctl: error: (said once)
            elif item.conn is not None:
                # A broker-port stream that was seen but not decoded (skipped as
                # undecodable, a gap, TLS): Kafka's port, so not "no Kafka traffic".
                stream_notices += 1
            if not summ:
                err.print(shown(f"# {item}"), markup=False)
            continue
        f: DecodedFrame = item
        found += 1
        if api_keys and f.api_key not in api_keys:
            continue
        if client_ids and f.client_id not in client_ids:
            continue
        if conn and not any(c in str(f.conn) for c in conn):
            continue
        if topics and not (report.topics_of(f) & topics):
            continue
        if errors_only and not report.has_errors(f):
            continue
        if summ is not None:
            summ.add(f)
            continue
        _emit(f, json_out, verbose, records, fmt, topics, out, err)

    if summ is not None and (found or not failures):
        # (Not when the one capture could not be read at all: just the error, no empty table.)
        s = summ.to_dict()
        if json_out:
            _line(out, report.dumps(s))
        else:
            for t in _summary_tables(s):
                out.print(t)
    if not found and not failures and not stream_notices:
        err.print(shown(no_kafka_traffic("decode", files, {p for plan in plans for p in plan.ports},
                                   auto="auto" in port,
                                   auto_found=any(plan.auto_found for plan in plans),
                                   seen=tcp_port_bytes(files))), markup=False)
        raise typer.Exit(1)
    if failures:
        # One line: the file, the file offset of the damage and what it is (the first
        # damage; any other was a # line where it happened).
        first = failures[0]
        where = first.file if first.offset is None else f"{first.file}, file offset {first.offset}"
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise RemoteProtocolError(shown(f"{where}: {first.message}{more}"))


def _summary_tables(s: dict) -> list:
    from kctl.ui.decode_view import summary_tables
    return summary_tables(s)


def _emit(f: DecodedFrame, json_out: bool, verbose: bool, records: bool, fmt: str,
          topics: set[str], out: Console, err: Console) -> None:
    if records:
        undecoded = report.frame_records_left_out(f)
        if undecoded is not None:
            err.print(f"# {undecoded}", markup=False)
        for rs in f.record_sets:
            if topics and rs.topic not in topics:
                continue
            for rv in report.set_records(f, rs):
                if json_out:
                    _line(out, report.dumps(report.record_json(rv)))
                else:
                    _line(out, report.format_record(fmt, rv))
            left_out = report.records_left_out(f, rs)
            if left_out is not None:
                # As the frame views say "bad records": never left out without a word.
                err.print(f"# {left_out}", markup=False)
        return
    if json_out:
        _line(out, report.dumps(report.frame_json(f)))
    elif verbose:
        from kctl.ui.decode_view import frame_tree
        out.print(frame_tree(f))
    else:
        _line(out, report.frame_line(f))


def _line(out: Console, text: str) -> None:
    """Plain text straight to the console's file: Rich's print scans every line
    for emoji codes and wraps it (most of --json's time on captures with big
    record sets), and these lines are already final."""
    out.file.write(text + "\n")


def _decode_hex(api_keys: set[int], version: int | None, json_out: bool, verbose: bool,
                records: bool, fmt: str, out: Console, err: Console, size_prefix: bool | None,
                show_secrets: bool = False) -> None:
    if len(api_keys) > 1:
        raise ConfigError("--hex takes at most one --api")
    key = next(iter(api_keys), None)
    if key is None and version is not None:
        raise ConfigError("--api-version goes with --api (a response's API): a request names its "
                          "own version in its header")
    if key is not None:
        if version is None:
            raise ConfigError("--hex with --api (a response) needs --api-version")
        info = API_BY_KEY[key]
        if not info.min_version <= version <= info.max_version:
            raise ConfigError(f"--api-version {version}: {info.name} has versions "
                              f"{info.min_version}-{info.max_version} in kctl's schema")
    # The options are checked above, before stdin is read (it may be a terminal).
    text = "".join(sys.stdin.read().split())
    try:
        data = binascii.unhexlify(text)
    except (binascii.Error, ValueError) as e:
        raise ConfigError(f"--hex: stdin is not hex ({e})") from None
    try:
        reading = decode_hex_frame(data, size_prefix=size_prefix, api_key=key,
                                   api_version=version, show_secrets=show_secrets)
    except ValueError as e:     # --size-prefix and a prefix that does not match
        raise ConfigError(f"--hex --size-prefix: {e}") from None
    if reading.both_decode:
        err.print(f"note: the first 4 bytes ({len(data) - 4}) are the length of the rest and the "
                  "frame decodes with or without them: read as its size prefix "
                  "(--no-size-prefix reads them as the frame's start)", markup=False)
    f = reading.frame
    _emit(f, json_out, verbose or not json_out, records, fmt, set(), out, err)
    if f.error is not None:
        raise f.error


def _stdin_as_file(files: list[Path], ports: list[str]) -> tuple[list[Path], str | None]:
    """``-`` is the capture on stdin (tshark's ``-r -``). Read as it arrives when the broker
    ports are given; ``--port auto`` reads the traffic twice, so stdin is kept in a
    temporary file first (decoded once tcpdump stops). Also: the name messages must show
    as "stdin" (/dev/stdin or the temporary file), None without ``-``."""
    if Path("-") not in files:
        return files, None
    if files.count(Path("-")) > 1:
        raise ConfigError("'-' (stdin) can be given once")
    if sys.stdin.isatty():
        raise ConfigError("'-' reads a capture from stdin, but stdin is a terminal: pipe one in "
                          "(tcpdump -w - | kctl decode -)")
    if "auto" not in ports:
        return [Path("/dev/stdin") if f == Path("-") else f for f in files], "/dev/stdin"
    import shutil
    import tempfile
    spool = tempfile.NamedTemporaryFile(prefix="kctl-stdin-", suffix=".pcap", delete=False)
    with spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
    import atexit
    import os
    atexit.register(os.unlink, spool.name)
    return [Path(spool.name) if f == Path("-") else f for f in files], spool.name


def register(app: typer.Typer) -> None:
    app.command("decode")(decode)
