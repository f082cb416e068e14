# Two entry points: `make demo` and `make test`. Both set up .venv (and Java) first.
VENV := .venv
STAMP := $(VENV)/.topicvault-installed
PYTEST_ARGS ?=

.PHONY: demo sandbox test unit faults setup bench soak clean

setup: $(STAMP)

$(STAMP): pyproject.toml ci/setup.sh ci/maven-jars.sh ci/kafka-jars.sh ci/maven/kafka.pom.xml ci/spark-kafka-jars.sh ci/maven/spark-kafka.pom.xml \
		ci/connect-jars.sh ci/maven/connect.pom.xml ci/maven/aiven-sink.pom.xml $(wildcard tests/connect/aiven/topicvault/harness/*.java) \
		ci/native.sh sink/_kafka_arrow.c sink/_kafka_arrow_writer.c sink/_kafka_arrow.h
	bash ci/setup.sh
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/topicvault demo

# A local Apache Kafka and S3 server (moto) with a bucket, until Ctrl-C: prints the lines to paste.
sandbox: $(STAMP)
	$(VENV)/bin/topicvault sandbox

# The suite in two workers, then the fault tests (tests/faults/, a three-node cluster) one at a
# time; TOPICVAULT_FAULTS=0 make test leaves the fault tests out.
test: $(STAMP)
	bash ci/test.sh $(PYTEST_ARGS)

# The pure-logic tier: no broker, S3 server or Spark (seconds; two workers).
unit: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n 2 tests/unit $(PYTEST_ARGS)

# The fault tests alone, on a three-node Apache Kafka cluster (minutes each, one at a time).
faults: $(STAMP)
	$(VENV)/bin/python -m pytest -n 0 tests/faults $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/run.py $(BENCH_ARGS)

# A followed backup, a standby, compact and expire under live traffic for MINUTES, then an exact check.
MINUTES ?= 30
soak: $(STAMP)
	$(VENV)/bin/python benchmarks/soak.py --minutes $(MINUTES) $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .tv-run .pytest_cache
