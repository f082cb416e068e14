"""`python -m topicvault …`, and the script to hand to `spark-submit` (see docs/operations.md, "Running on a Spark cluster").

spark-submit runs this file as a script, which puts its directory first on sys.path; that
directory holds topicvault's own modules (core, keys, report, …), which must not shadow
top-level modules of the same names, so it is taken off the path before anything is imported.
"""

import os
import sys

if not __package__:
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

from topicvault.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
