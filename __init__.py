"""topicvault: back up Kafka topics to object storage and restore them exactly."""

__version__ = "0.1.0"
