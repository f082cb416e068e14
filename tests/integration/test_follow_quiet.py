"""An idle `backup --follow` is quiet: no polling of the backup state (issue #18 item 2).

Requests are counted at the S3 server: a moto_server of this module's own logs one line per
request to the followed location's bucket.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid

import boto3
import pytest
from clitools import CLI, wait_for
from harness_s3 import logged_requests, moto_server
from kafkatools import produce_records
from topicvault.core.envelope import Record

IDLE_WINDOW_S = 12.0  # the old follower read the whole state every second


@pytest.fixture
def counted_s3(s3_endpoint, tmp_path):
    """A moto_server of this test's own (credentials from the s3_endpoint fixture) and its log."""
    with moto_server(tmp_path) as endpoint:
        yield endpoint, next(tmp_path.glob("moto-*.log"))


def test_an_idle_follower_makes_no_store_requests(bootstrap, topic_factory, counted_s3, tmp_path):
    endpoint, log = counted_s3
    bucket = f"tv-quiet-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    topic = topic_factory(1, prefix="quiet")
    records = [Record(topic, 0, 0, b"k%d" % i, b"v", 1_700_000_000_000 + i, 0, ()) for i in range(20)]
    produce_records(bootstrap, topic, records[:19])
    produce_records(bootstrap, topic, records[19:])  # tansu: a last single-record batch makes the end exact
    output = tmp_path / "follow.log"
    with open(output, "wb") as out:
        follower = subprocess.Popen(
            [CLI, "backup", "--follow", "-b", bootstrap, "--to", f"s3://{bucket}/loc", "-S", f"endpoint_url={endpoint}",
             "-t", topic, "--flush-interval", "1", "--master", "local[1]"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=dict(os.environ))
    try:
        wait_for(lambda: re.search(r"commits? [\d.]+: \d+ records? backed up \(20 in the archive\)", output.read_text()), 240,
                  "the follower to commit the records")
        time.sleep(5)  # let the micro-batch that committed them finish its bookkeeping
        before = len(logged_requests(log, bucket))
        time.sleep(IDLE_WINDOW_S)
        idle = logged_requests(log, bucket)[before:]
        assert follower.poll() is None, output.read_text()[-3000:]
        rate = len(idle) / IDLE_WINDOW_S
        print(f"idle follower: {len(idle)} S3 requests in {IDLE_WINDOW_S:.0f} s ({rate:.2f}/s)")
        # Before checkpoints: the whole state (a listing and a GET per commit) was read every
        # second; then a listing after each of Spark's idle progress reports (every 10 s). Now the
        # follower reads the store only after a micro-batch that read records: none while idle.
        assert idle == [], idle[:10]
        os.kill(follower.pid, signal.SIGTERM)  # the topicvault process only: a graceful stop
        assert follower.wait(120) == 0, output.read_text()[-3000:]
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait(30)
