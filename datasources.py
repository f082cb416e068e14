"""topicvault's Spark data sources, for users' own PySpark pipelines.

    from topicvault.datasources import register
    register(spark)
    df = spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", B).option("subscribe", "orders").load()
    # Both Kafka readers spread ranges over at least .option("minPartitions", N) tasks (default:
    # the driver's cores), each reading many partitions through one consumer.
    df.write.format("topicvault").mode("append").save("s3://bucket/backup")
    # Only mode("append"). Every offset from the committed end must be in the rows: a filtered
    # DataFrame is refused; for a topic's own gaps (transaction markers, compaction) add
    # .option("allowOffsetGaps", "true").
    spark.read.format("topicvault").load("s3://bucket/backup")          # envelope rows, offset order per partition
    rows.write.format("topicvault-kafka").option("kafka.bootstrap.servers", B).mode("append").save()
    # A retried task of this writer produces nothing and fails the job (the target holds a prefix);
    # `topicvault restore` is the resumable path.
    # .option("maxRecordsPerSecond", N) / .option("maxBytesPerSecond", N) limit the whole write (shared by
    # the tasks at once: a local[N] master's cores, else give .option("concurrentTasks", N)); a session
    # with spark.speculation=true is refused before anything is produced.
    # continuous: start at the location's committed ends, one commit record per micro-batch
    (spark.readStream.format("topicvault-kafka").option("kafka.bootstrap.servers", B).option("subscribe", "orders")
        .option("startFromLocation", "s3://bucket/backup").load()
        .writeStream.format("topicvault").option("checkpointLocation", "/tmp/ckpt").start("s3://bucket/backup"))
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .core.envelope import SPARK_SCHEMA_DDL
from .core.errors import TopicvaultError
from .core.spark import ship_wheels, workers_python
from .sink.backup_datasource import KafkaRangeReader, ObjectBatchWriter
from .sink.stream import KafkaStreamReader, ObjectStreamWriter
from .source.restore_datasource import KafkaPartitionWriter, ObjectReader


class TopicvaultKafka(DataSource):
    """`topicvault-kafka`: read offset ranges of topics; write rows to their partitions."""

    @classmethod
    def name(cls) -> str:
        return "topicvault-kafka"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema):
        return KafkaRangeReader(self.options)

    def writer(self, schema, overwrite: bool):
        refuse_overwrite(overwrite, "topicvault-kafka", "records already in a topic cannot be replaced")
        return KafkaPartitionWriter(self.options)

    def streamReader(self, schema):
        return KafkaStreamReader(self.options)


class Topicvault(DataSource):
    """`topicvault`: read committed backup objects; write rows as objects plus a commit record."""

    @classmethod
    def name(cls) -> str:
        return "topicvault"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema):
        return ObjectReader(self.options)

    def writer(self, schema, overwrite: bool):
        refuse_overwrite(overwrite, "topicvault", "committed objects of a backup are never replaced")
        return ObjectBatchWriter(self.options)

    def streamWriter(self, schema, overwrite: bool):
        refuse_overwrite(overwrite, "topicvault", "committed objects of a backup are never replaced")
        return ObjectStreamWriter(self.options)


def refuse_overwrite(overwrite: bool, source: str, why: str) -> None:
    """Both writers only append: Spark's overwrite (or complete output mode) would silently append."""
    if overwrite:
        raise TopicvaultError(
            f'mode("overwrite") is not supported by the {source} writer ({why}): use mode("append"), '
            "or write to a new location or topic"
        )


def register(spark) -> None:
    """Register both data sources with a Spark session, their workers running a Python that can import
    topicvault (see core.spark.workers_python: else one line saying how to fix it)."""
    context = spark.sparkContext
    ship_wheels(context)  # a wheel given to spark-submit --py-files, as for the CLI's jobs
    python = workers_python(context)
    # The sources keep the Python the context names when they are registered; other jobs keep the session's.
    chosen, context.pythonExec = context.pythonExec, python
    try:
        spark.dataSource.register(TopicvaultKafka)
        spark.dataSource.register(Topicvault)
    finally:
        context.pythonExec = chosen
