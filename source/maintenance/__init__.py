"""Archive maintenance: `compact`, `expire` and garbage collection, each read, plan, execute.

- `compact.py`: merge each partition's small committed objects (`read_compact`, `plan_compact` ->
  `CompactPlan`, `execute_compact`).
- `expire.py`: drop each partition's oldest whole objects (`read_expire`, `plan_expire` ->
  `ExpirePlan`, `execute_expire`).
- `garbage.py`: delete retired objects and orphans after the grace period (`read_collection`,
  `plan_collection` -> `GarbagePlan`, `execute_collection`).

Each reads the facts (the state; for a dry run, the listing its collection would see), hands them
to a pure planner that returns a frozen plan carrying what execution needs, and `execute`s it;
with `--dry-run`, execute checks what it must and returns the plan as its result. The CLI and the
tests call these same three. This package sits above sink/ and source/ (it writes objects like a
backup and reads them like a restore) and below the CLI.
"""
