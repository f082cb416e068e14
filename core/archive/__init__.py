"""The archive layer: what topicvault keeps under `_topicvault/` and how it is written.

- `archive_keys`: the name of every key under `_topicvault/`;
- `commits`: commit records and folding them into the archive's state;
- `commit_log`: `append`, the one way a commit is written (build, conditional write, retry);
- `checkpoints`: the folded state every 50th commit, and reading forward from it;
- `leases`: runs that hold objects against garbage collection;
- `conditional_writes`: whether the store honours If-None-Match, and commit turns where it does not.

Maintenance that rewrites or drops committed objects: `source/compact.py`, `sink/expire.py`,
`sink/retire.py` (they read and write objects, so they sit above core).
"""
