"""Address rewriting without sockets: plain mode makes a listener per broker, virtual mode
presents one broker as several."""

from kctl.inspect.rewrite import ResponseRewriter, clamp_api_versions
from kctl.protocol import messages, schema

MD = messages.message_class("MetadataResponse")
FC = messages.message_class("FindCoordinatorResponse")


def _metadata(partitions=4):
    return MD(brokers=[MD.MetadataResponseBroker(node_id=n, host=f"b{n}.example", port=9092)
                       for n in (1, 2)],
              controller_id=2, cluster_id="c",
              topics=[MD.MetadataResponseTopic(name="t", partitions=[
                  MD.MetadataResponsePartition(partition_index=p, leader_id=1 + p % 2,
                                               replica_nodes=[1, 2], isr_nodes=[1, 2])
                  for p in range(partitions)])])


def _plain():
    made = {}

    def listener_port(host, port):
        return made.setdefault((host, port), 20000 + len(made))
    return ResponseRewriter("127.0.0.1", listener_port), made


def test_plain_mode_gives_each_broker_its_own_listener():
    rw, made = _plain()
    body = _metadata()
    assert rw.rewrite(3, body)
    assert [(b.node_id, b.host, b.port) for b in body.brokers] == \
           [(1, "127.0.0.1", 20000), (2, "127.0.0.1", 20001)]
    assert made == {("b1.example", 9092): 20000, ("b2.example", 9092): 20001}
    assert [p.leader_id for p in body.topics[0].partitions] == [1, 2, 1, 2]   # untouched
    again = _metadata()
    rw.rewrite(3, again)
    assert len(made) == 2   # the same listeners next time
    # Re-encodes at every version that has brokers.
    for v in (1, 4, 9, 12):
        out = messages.encode_response(3, v, 7, body)
        assert messages.decode_response(out, 3, v).body.brokers[1].port == 20001


def test_find_coordinator_both_layouts():
    rw, made = _plain()
    old = FC(node_id=2, host="b2.example", port=9092)
    assert rw.rewrite(10, old) and (old.host, old.port) == ("127.0.0.1", 20000)
    new = FC(coordinators=[FC.Coordinator(key="g", node_id=1, host="b1.example", port=9092)])
    assert rw.rewrite(10, new)
    assert (new.coordinators[0].host, new.coordinators[0].port) == ("127.0.0.1", 20001)


def test_virtual_mode_spreads_leadership():
    rw = ResponseRewriter("127.0.0.1", lambda h, p: 1 / 0, virtual=[(1, 30001), (2, 30002), (3, 30003)])
    body = _metadata(partitions=6)
    body.brokers = body.brokers[:1]
    assert rw.rewrite(3, body)
    assert [(b.node_id, b.port) for b in body.brokers] == [(1, 30001), (2, 30002), (3, 30003)]
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in body.topics[0].partitions] == \
           [(n, [n], [n]) for n in (1, 2, 3, 1, 2, 3)]
    assert body.controller_id == 1
    fc = FC(coordinators=[FC.Coordinator(key="g", node_id=111, host="x", port=1)])
    rw.rewrite(10, fc)
    assert (fc.coordinators[0].node_id, fc.coordinators[0].port) == (1, 30001)


def test_api_versions_clamped_to_what_kctl_decodes():
    av = messages.message_class("ApiVersionsResponse")
    top = max(schema.API_BY_KEY[3].response.valid_versions)
    body = av(api_keys=[av.ApiVersion(api_key=3, min_version=0, max_version=top + 5),
                        av.ApiVersion(api_key=9999, min_version=0, max_version=3)])
    assert clamp_api_versions(body)
    assert [k.max_version for k in body.api_keys] == [top, 3]
    assert not clamp_api_versions(body)
