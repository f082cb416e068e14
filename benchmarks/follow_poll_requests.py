"""Store requests of an idle `restore --follow` per poll, against the archive's history (issue #19 item 4).

    .venv/bin/python benchmarks/follow_poll_requests.py [--histories 10,1000] [--seconds 5]

For each history length, commits synthetic records (benchmarks/state_requests.py) into a
fresh bucket of an in-process moto S3 server, plans the standby's next poll from the state a
round would have read, then lets it poll every 0.1 s with nothing new and counts the requests
the server answered (one werkzeug log line each).
"""

from __future__ import annotations

import argparse
import sys
import threading

import boto3
from state_requests import RequestCounter, start_counted_moto, synthetic_commits
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.stores.locations import open_store
from topicvault.source.restore.restore_job import RestoreJob, RestorePlan
from topicvault.source.restore.standby import _wait_for_news

POLL_S = 0.1


def idle_polls(counter: RequestCounter, history: int, seconds: float) -> tuple[int, int]:
    """(polls at most: seconds / interval, requests answered) while a standby of a `history`-commit archive waits `seconds`."""
    bucket = f"follow-{history}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/loc"
    state = synthetic_commits(open_store(uri), history)
    job = RestoreJob(KafkaSettings.of("127.0.0.1:9"), uri)  # never contacted: polls read the store only
    plan = RestorePlan("bench", [], {"t": "t"}, {}, resumed=True, archive=state)
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    before = counter.count
    assert not _wait_for_news(job, plan, POLL_S, stop)
    return int(seconds / POLL_S), counter.count - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", default="10,1000", help="comma-separated commit counts")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each standby polls")
    args = parser.parse_args()
    counter = RequestCounter()
    server = start_counted_moto(counter)
    try:
        print(f"{'commits':>8} {'polls at most':>13} {'requests':>9}")
        for history in (int(h) for h in args.histories.split(",")):
            polls, requests = idle_polls(counter, history, args.seconds)
            print(f"{history:>8} {polls:>13} {requests:>9}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
