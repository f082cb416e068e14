"""Object-key codec: render and parse object keys (pure Python, no Spark or Kafka)."""

from .codec import (
    AIVEN_DEFAULT_TEMPLATE,
    KeyCodec,
    ObjectKey,
    default_codec,
    key_template_of,
    new_run_id,
    parse_keys,
    template_codec,
    time_partitioned_template,
)

__all__ = ["AIVEN_DEFAULT_TEMPLATE", "KeyCodec", "ObjectKey", "default_codec", "key_template_of", "new_run_id", "parse_keys", "template_codec",
           "time_partitioned_template"]
