"""The three-node harness itself: a killed leader is replaced, and the cluster heals after."""

from kafkatools import LiveTraffic, consume_all


def test_a_killed_leader_is_replaced_under_live_traffic_with_nothing_lost(cluster, topic_factory):
    import time

    topic = topic_factory(1, prefix="failover")
    with LiveTraffic(cluster.bootstrap, topic) as traffic:
        while traffic.count() < 200:
            time.sleep(0.05)
        leader = cluster.leader(topic, 0)
        cluster.kill(leader)
        deadline = time.monotonic() + 60
        while cluster.leader(topic, 0) in (leader, -1):
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(f"no new leader for {topic}[0] within 60 s")
            time.sleep(0.2)
        before = traffic.count()
        while traffic.count() < before + 200:
            time.sleep(0.05)
    assert not traffic.failed
    found = [r.value for r in consume_all(cluster.bootstrap, topic)[0]]
    assert found == [value for _, value in traffic.acked[0]]
