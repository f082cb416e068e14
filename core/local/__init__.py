"""The local parts a user or a test starts: Apache Kafka nodes, Kafka Connect, the S3 server,
the embedded broker, JVM launching, the sandbox, crash injection. Nothing a backup or restore runs in
production imports them."""
