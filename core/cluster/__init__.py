"""Kafka cluster access: clients and metadata, topic settings, group offsets, ACLs and users, and
the schema registry beside the cluster."""
