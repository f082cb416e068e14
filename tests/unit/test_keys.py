"""Object-key codec: round trips over random legal names, ordering, templates, rejections."""

from __future__ import annotations

import random
import re
import string

import pytest
from topicvault.core.errors import KeyParseError
from topicvault.keys import AIVEN_DEFAULT_TEMPLATE, ObjectKey, default_codec, new_run_id, parse_keys, template_codec
from topicvault.keys.codec import TemplateCodec

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
MAX_OFFSET = 2**63 - 1


def random_topics(count: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    topics = ["a", ".", "-", "_", "0", "...", "--", "1.2-3", "x" * 249, "9" * 249]
    while len(topics) < count:
        alphabet = rng.choice([TOPIC_CHARS, "._-", string.digits + "-", string.digits + "."])
        topics.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 249))))
    return topics


def random_position(rng: random.Random) -> tuple[int, int]:
    partition = rng.choice([0, 1, 2**31 - 1, rng.randrange(2**31)])
    offset = rng.choice([0, 1, MAX_OFFSET, rng.randrange(MAX_OFFSET), rng.randrange(10**6)])
    return partition, offset


@pytest.mark.parametrize(
    "template",
    [
        None,
        AIVEN_DEFAULT_TEMPLATE,
        "{{topic}}/{{partition:padding=true}}/{{start_offset:padding=true}}",
        "year={{timestamp:unit=yyyy}}/month={{timestamp:unit=MM}}/{{topic}}/p{{partition}}/{{start_offset}}",
        "dt={{utc_date}}/{{topic}}+{{partition}}+{{start_offset}}",
        "{{topic}}.{{start_offset}}.{{partition}}",
    ],
)
def test_render_parse_round_trip(template):
    codec = default_codec() if template is None else template_codec(template)
    rng = random.Random(template)
    for topic in random_topics(2_000):
        partition, offset = random_position(rng)
        extension = rng.choice(["parquet", "avro", "jsonl.gz", "csv"])
        key = codec.render(topic, partition, offset, extension, timestamp_ms=rng.randrange(0, 4102444800000))
        assert codec.parse(key) == ObjectKey(topic, partition, offset, extension), key


def test_default_keys_sort_like_offsets():
    codec = default_codec()
    rng = random.Random(5)
    offsets = sorted({rng.choice([rng.randrange(1000), rng.randrange(MAX_OFFSET)]) for _ in range(3000)} | {0, MAX_OFFSET})
    keys = [codec.render("t", 7, o, "parquet") for o in offsets]
    assert sorted(keys) == keys
    assert codec.render("t", 0, 42, "parquet") == "topic=t/partition=0/0000000000000000042.parquet"


def test_unmatched_keys_are_reported_not_skipped():
    codec = default_codec()
    good = codec.render("orders", 1, 5, "parquet")
    parsed, unmatched = parse_keys(codec, [good, "topic=orders/partition=1/5.parquet", "_topicvault/commits/1.json",
                                           "topic=bad topic/partition=1/0000000000000000005.parquet"])
    assert parsed == [(good, ObjectKey("orders", 1, 5, "parquet"))]
    assert len(unmatched) == 3


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{topic}}{{partition}}/{{start_offset}}", "side by side"),
        ("{{topic}}/{{partition}}{{start_offset}}", "side by side"),
        ("{{topic}}/{{partition}}", "lacks {{start_offset}}"),
        ("{{topic}}/{{start_offset}}", "lacks {{partition}}"),
        ("{{partition}}/{{start_offset}}", "lacks {{topic}}"),
        ("{{topic}}/{{partition}}/{{start_offset}}/{{nope}}", "unknown placeholder {{nope}}"),
        ("{{topic}}/{{partition:padding=maybe}}/{{start_offset}}", "unknown placeholder"),
        ("{{timestamp:unit=ss}}/{{topic}}/{{partition}}/{{start_offset}}", "unit=yyyy"),
        ("{{partition}}/{{start_offset}}/{{topic}}", "ends with {{topic}}"),
        ("{{topic}}/{{partition}}/{{start_offset}}/{{topic}}", "repeats"),
        ("{{topic}}/{{partition}}/{{start_offset}", "malformed"),
    ],
)
def test_unparseable_templates_are_rejected_with_a_reason(template, message):
    with pytest.raises(KeyParseError, match=message.replace("{", r"\{").replace("}", r"\}")):
        template_codec(template)


@pytest.mark.parametrize("template", ["{{topic}}/{{partition}}1{{start_offset}}", "{{topic}}1{{partition}}/{{start_offset}}",
                                      "{{topic}}/{{start_offset}}0/{{partition}}", "{{topic}}/{{partition}}9-{{start_offset}}"])
def test_a_digit_right_after_a_variable_length_field_is_rejected(template):
    # {{partition}}1{{start_offset}} renders partition 1 at offset 123 and partition 11 at offset 23
    # both as 11123: two objects, one key.
    with pytest.raises(KeyParseError, match="digit"):
        template_codec(template)


def test_a_digit_after_a_fixed_width_field_or_a_separator_is_fine():
    for template in ("{{topic}}/{{partition:padding=true}}1{{start_offset}}", "{{topic}}/{{partition}}-1{{start_offset}}"):
        codec = template_codec(template)
        keys = {codec.render("t1", p, s, "csv"): (p, s) for p, s in ((1, 123), (11, 23), (111, 3), (0, 0))}
        assert len(keys) == 4
        assert {k: (codec.parse(k).partition, codec.parse(k).start_offset) for k in keys} == keys


def test_template_bound_to_a_topic():
    codec = template_codec("{{partition}}/{{start_offset}}", topic="orders.v1")
    key = codec.render("orders.v1", 3, 9, "avro")
    assert key == "3/9.avro"
    assert codec.parse(key) == ObjectKey("orders.v1", 3, 9, "avro")
    with pytest.raises(KeyParseError):
        codec.render("other", 3, 9, "avro")


def test_time_placeholders_render_utc():
    codec = template_codec("{{timestamp:unit=yyyy}}/{{timestamp:unit=MM}}/{{timestamp:unit=dd}}/"
                           "{{timestamp:unit=HH}}/{{utc_date}}/{{topic}}-{{partition}}-{{start_offset}}")
    # 2026-11-22T07:30:00Z
    assert codec.render("t", 0, 1, "", timestamp_ms=1_795_332_600_000) == "2026/11/22/07/2026-11-22/t-0-1"


@pytest.mark.parametrize("topic, partition, offset", [("bad topic", 0, 0), ("", 0, 0), ("t", -1, 0), ("t", 0, -1),
                                                      ("t", 0, 2**63), ("x" * 250, 0, 0)])
def test_render_rejects_illegal_values(topic, partition, offset):
    with pytest.raises(KeyParseError):
        default_codec().render(topic, partition, offset, "parquet")


# Run ids in keys (issue #16 item 2): every run names its objects apart from every other run.
TEMPLATES_WITH_RUNS = [
    "{{topic}}/{{partition}}/{{start_offset}}",
    "{{topic}}-{{partition}}-{{start_offset}}",
    "{{start_offset:padding=true}}-{{partition}}/{{topic}}/x",
    "{{topic}}/dt={{timestamp:unit=yyyy}}/{{partition:padding=true}}/{{start_offset:padding=true}}",
]


@pytest.mark.parametrize("codec", [default_codec(), *map(template_codec, TEMPLATES_WITH_RUNS)],
                         ids=["hive", *TEMPLATES_WITH_RUNS])
def test_keys_with_run_ids_parse_back_and_keys_without_still_parse(codec):
    rng = random.Random(16)
    for topic in random_topics(60):
        partition, offset = random_position(rng)
        run = new_run_id()
        for extension, with_run in (("parquet", run), ("jsonl.gz", run), ("avro", "")):
            key = codec.render(topic, partition, offset, extension, timestamp_ms=1_700_000_000_000, run=with_run)
            assert codec.parse(key) == ObjectKey(topic, partition, offset, extension, with_run), key


def test_run_ids_differ_and_keys_still_sort_by_start_offset():
    codec = default_codec()
    runs = [new_run_id() for _ in range(1000)]
    assert len(set(runs)) == 1000
    offsets = sorted(random.Random(5).sample(range(10**12), 300)) + [MAX_OFFSET]
    keys = [codec.render("t", 0, o, "parquet", run=random.choice(runs + [""])) for o in offsets]
    assert sorted(keys) == keys
    assert codec.render("t", 0, 5, "parquet", run=runs[0]) != codec.render("t", 0, 5, "parquet", run=runs[1])


def test_a_malformed_run_id_is_refused():
    with pytest.raises(KeyParseError, match="run id"):
        default_codec().render("t", 0, 5, "parquet", run="../x")


@pytest.mark.parametrize("unit, folders", [("day", "date=2023-11-14/"), ("hour", "date=2023-11-14/hour=22/")])
def test_time_partition_templates_render_folders_and_parse_back(unit, folders):
    from topicvault.keys import time_partitioned_template

    codec = template_codec(time_partitioned_template(unit))
    key = codec.render("orders", 3, 42, "parquet", timestamp_ms=1_700_000_000_000)
    assert key.startswith(f"topic=orders/partition=3/{folders}")
    parsed = codec.parse(key)
    assert (parsed.topic, parsed.partition, parsed.start_offset) == ("orders", 3, 42)


def test_bad_time_partition_unit_is_refused():
    from topicvault.keys import time_partitioned_template

    with pytest.raises(KeyParseError, match="use day or hour"):
        time_partitioned_template("minute")


# Aiven's {{key}} (peer names only, issue #36): the key's text, "null", or Java's "[B@<hash>".
def test_aiven_key_placeholder_parses_any_key_text():
    codec = TemplateCodec("{{topic}}/{{partition}}/{{key}}-{{start_offset}}")
    for text in ("key-0-1", "null", "[B@6d06d69c", "a/b-7", "", "line\nbreak"):
        assert codec.parse(f"orders/3/{text}-42") == ObjectKey("orders", 3, 42, ""), text


@pytest.mark.parametrize("template, message", [
    ("{{topic}}-{{partition}}-{{key}}-{{start_offset}}", "no '/' between {{topic}} and {{key}}"),
    ("{{topic}}/{{partition}}/{{key}}", "latest record"),
    ("{{key}}", "latest record"),
])
def test_aiven_key_templates_that_cannot_be_read_back_are_refused(template, message):
    with pytest.raises(KeyParseError, match=re.escape(message)):
        TemplateCodec(template)


def test_key_placeholder_is_refused_for_topicvaults_own_objects():
    with pytest.raises(KeyParseError, match="drop it"):
        template_codec("{{topic}}/{{partition}}/{{key}}/{{start_offset}}")
