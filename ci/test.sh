#!/usr/bin/env bash
# Run the test suite with the broker container engine up, and always stop it afterwards.
set -uo pipefail
cd "$(dirname "$0")/.."
trap 'bash ci/broker-engine.sh stop' EXIT
source ci/broker-engine.sh start
.venv/bin/python -m pytest "$@"
status=$?
# pytest exit code 5 means no tests ran: that is a failure too (any non-zero status is kept).
exit $status
