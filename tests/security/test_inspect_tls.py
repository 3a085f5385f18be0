"""``kctl inspect`` with TLS on either side, still decoding: a TLS client through the proxy
terminating TLS to the plain embedded broker, and a plain client through the proxy
speaking TLS to stunnel in front of a broker. Certificates are made by trustme."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.engine.tls import context_for, listener_context
from kctl.inspect.proxy import InspectorProxy
from kctl.inspect.session import DecodedFrame, decode_files

trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect-tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    server = ca.issue_cert("localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    # the same key encrypted, as a Kafka engineer's key files often are
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    (tmp / "server.enc.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret")))
    server.cert_chain_pems[0].write_to_path(str(tmp / "server.crt"))
    (tmp / "password").write_text("s3cret\n")
    return tmp


def _tls_props(certs, bootstrap: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.pem")}


def _produce(bootstrap_props: dict[str, str], topic: str, n: int) -> list:
    cfg = ProducerConfig.from_properties({**bootstrap_props, "linger.ms": "5"})
    with Producer(cfg) as p:
        handles = [p.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(n)]
        assert p.flush(20)
    return handles


def _create(bootstrap: str, topic: str, security=None) -> None:
    with BlockingClient(bootstrap, security=security) as c:
        admin.create_topics(c, [topic], partitions=1)


def test_tls_client_through_the_proxy_terminating_tls(broker, certs, tmp_path):
    topic = "inspect-tls-in"
    _create(broker.bootstrap, topic)
    cap = tmp_path / "tls-in.pcapng"
    events = []
    ctx = listener_context(str(certs / "server.pem"))
    with InspectorProxy([broker.bootstrap], advertised_host="localhost", capture=cap,
                        on_frame=events.append, listen_ssl_context=ctx) as proxy:
        bootstrap = f"localhost:{proxy.listeners[0][1]}"
        props = _tls_props(certs, bootstrap)
        handles = _produce(props, topic, 200)
        assert all(h.error is None and h.offset >= 0 for h in handles)
        security = ProducerConfig.from_properties(props).security
        with BlockingClient(bootstrap, security=security) as c:
            batches = admin.read_partition(c, topic, 0, expect=200)
        listen_port = proxy.listeners[0][1]
        assert proxy.loop_error is None
    values = {r.value for b in batches for r in b.records}
    assert {f"v{i}".encode() for i in range(200)} <= values
    names = {(e.direction, e.api_name) for e in events}
    assert {("request", "ApiVersions"), ("request", "Produce"), ("response", "Produce"),
            ("response", "Fetch")} <= names
    produce_resps = [e for e in events if e.direction == "response" and e.api_name == "Produce"]
    assert all(e.body is not None for e in produce_resps)
    # The capture holds the frames in clear on both legs, and kctl decode reads them.
    broker_port = int(broker.bootstrap.rsplit(":", 1)[1])
    frames = [f for f in decode_files([cap], (listen_port, broker_port))
              if isinstance(f, DecodedFrame)]
    assert any(f.api_name == "Produce" and f.direction == "request" for f in frames)
    assert not [f for f in frames if "decode_error" in f.marks]
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(cap), "--port", str(listen_port),
                          "--port", str(broker_port), "--summary", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Produce" in run.stdout and "TLS" not in run.stderr


def test_tls_terminated_in_processor_processes(broker, certs, tmp_path):
    """The processes build their own contexts from the recipe; the merged capture is in clear."""
    from kctl.inspect.proxy import ListenerTls
    topic = "inspect-tls-processes"
    _create(broker.bootstrap, topic)
    cap = tmp_path / "tls-processes.pcapng"
    with InspectorProxy([broker.bootstrap], advertised_host="localhost", capture=cap, processors=2,
                        listen_tls=ListenerTls(str(certs / "server.pem"))) as proxy:
        bootstrap = f"localhost:{proxy.listeners[0][1]}"
        handles = _produce(_tls_props(certs, bootstrap), topic, 100)
        assert all(h.error is None and h.offset >= 0 for h in handles)
        snap = proxy.snapshot()
    assert snap.apis["Produce"].records == 100 and snap.faults.get("client_tls_failed") is None
    frames = [f for f in decode_files([cap], {proxy.listeners[0][1]}, interfaces={0})
              if isinstance(f, DecodedFrame)]
    assert sum(rs.record_count for f in frames if f.api_name == "Produce" and f.direction == "request"
               for rs in f.record_sets) == 100


def test_tls_handshake_failure_leaves_the_proxy_serving(broker, certs):
    ctx = listener_context(str(certs / "server.pem"))
    with InspectorProxy([broker.bootstrap], advertised_host="localhost", listen_ssl_context=ctx) as proxy:
        port = proxy.listeners[0][1]
        with pytest.raises(Exception):
            BlockingClient(f"127.0.0.1:{port}", timeout_s=5).connect()   # plain Kafka to a TLS port
        props = _tls_props(certs, f"localhost:{port}")
        with BlockingClient(f"localhost:{port}", security=ProducerConfig.from_properties(props).security) as c:
            assert admin.fetch_metadata(c).brokers[0].port == port
        assert proxy.loop_error is None


@pytest.mark.skipif(shutil.which("stunnel4") is None and shutil.which("stunnel") is None,
                    reason="stunnel not installed (tools/setup.sh)")
def test_plain_client_through_the_proxy_to_a_tls_broker(tmp_path):
    from tests.security.test_tls import TlsCluster
    tls = TlsCluster(tmp_path).start()
    try:
        upstream = f"localhost:{tls.port}"
        _create(upstream, "inspect-tls-up", tls.security())
        up_ctx = context_for(tls.security())
        events = []
        with InspectorProxy([upstream], upstream_ssl_context=up_ctx, on_frame=events.append) as proxy:
            handles = _produce({"bootstrap.servers": proxy.bootstrap}, "inspect-tls-up", 100)
            assert all(h.error is None for h in handles)
            with BlockingClient(proxy.bootstrap) as c:
                md = admin.fetch_metadata(c)
                batches = admin.read_partition(c, "inspect-tls-up", 0, expect=100)
            assert proxy.loop_error is None
        assert md.brokers[0].port == proxy.listeners[0][1]   # the advertised TLS listener, rewritten
        assert sum(len(b.records) for b in batches) >= 100
        assert any(e.api_name == "Produce" and e.body is not None for e in events)
        # Host name checked: the broker's certificate names localhost, not 127.0.0.1.
        with InspectorProxy([f"127.0.0.1:{tls.port}"], upstream_ssl_context=up_ctx) as proxy:
            with pytest.raises(Exception):
                BlockingClient(proxy.bootstrap, timeout_s=5).connect()
            deadline = time.monotonic() + 5
            while proxy.last_upstream_tls_error is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert "does not match the host name" in (proxy.last_upstream_tls_error or "")
            assert "127.0.0.1" in proxy.last_upstream_tls_error
            assert proxy.snapshot().faults.get("upstream_tls_failed")
    finally:
        tls.stop()


def test_an_encrypted_listener_key_opens_with_its_password(certs):
    from kctl.commands.inspect import _secret
    from kctl.inspect.proxy import ListenerTls
    password = _secret(f"@{certs / 'password'}", "--listen-tls-key-password")
    tls = ListenerTls(str(certs / "server.crt"), str(certs / "server.enc.key"), password)
    assert tls.context() is not None and "s3cret" not in repr(tls)


def test_cli_tls_options_are_checked(certs):
    enc = ["--listen-tls-cert", str(certs / "server.crt"), "--listen-tls-key", str(certs / "server.enc.key")]
    up_enc = ["--upstream-tls", "--upstream-cert", str(certs / "server.crt"),
              "--upstream-key", str(certs / "server.enc.key")]
    cases = [(enc, "the key is encrypted; set --listen-tls-key-password"),
             (up_enc, "the key is encrypted; set ssl.key.password"),
             ([*enc, "--listen-tls-key-password", "wrong"], "does not decrypt with --listen-tls-key-password"),
             ([*enc, "--listen-tls-key-password", "@/nonexistent"], "cannot read the secret file"),
             (["--upstream-ca", "/nonexistent"], "--upstream-tls"),
             (["--upstream-tls", "--upstream-ca", "/nonexistent"], "ssl.ca.location"),
             (["-X", "security.protocol=SASL_SSL"], "passes SASL through"),
             (["--listen-tls-cert", "/nonexistent"], "listener certificate")]
    runs = [subprocess.Popen([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for args, _ in cases]   # in parallel: each start costs a second or so
    for (args, needle), run in zip(cases, runs):
        _, err = run.communicate(timeout=30)
        assert run.returncode == 2 and needle in err and len(err.strip().splitlines()) == 1, (args, err)
