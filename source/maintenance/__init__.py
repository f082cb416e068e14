"""Archive maintenance: `compact`, `expire` and garbage collection, each as plan, then execute.

- `compact.py`: merge each partition's small committed objects (`plan_compact` -> `CompactPlan`).
- `expire.py`: drop each partition's oldest whole objects (`plan_expire` -> `ExpirePlan`).
- `garbage.py`: delete retired objects and orphans after the grace period (`plan_collection` ->
  `GarbagePlan`).

Each gathers the facts (the state, the listing, the leases), hands them to a pure planner that
returns a frozen plan, and `execute`s it; `--dry-run` stops after the plan. This package sits above
sink/ and source/ (it writes objects like a backup and reads them like a restore) and below the CLI.
"""
