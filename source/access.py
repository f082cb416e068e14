"""ACLs and SCRAM users after a restore (`restore --cluster-state`): the plan from the archive's
saved state (at --until) and the target's own, applied once the topics exist and before any
record is produced (source.restore.run_restore), so applications find their rights in place."""

from __future__ import annotations

import os
from typing import Mapping

from ..core.access import AccessPlan, AccessState, plan_access, scram_passwords
from ..core.cluster import target_access
from ..core.text import iso
from .restore import RestoreJob, RestorePlan

# Said by every --cluster-state restore: a backup cannot know whether the cluster had quotas, as
# no Python client it can use reads them (docs/recovery-runbook.md).
QUOTAS_NOT_SAVED = ("client quotas are not restored (backups cannot read them: confluent-kafka and kafka-python have "
                    "no DescribeClientQuotas): set them on the target again with kafka-configs --alter "
                    "--entity-type users|clients")


def plan_cluster_access(job: RestoreJob, plan: RestorePlan, passwords_file: str | None, merge: bool,
                        environ: Mapping[str, str] = os.environ, *, add_mechanisms: bool = False,
                        accept_renamed_access: bool = False) -> AccessPlan:
    """What --cluster-state creates on the target; refuses (one line, before anything is written)
    a target whose ACLs the archive does not hold, unless `merge`, and renamed topics whose access
    would differ from their source's, unless `accept_renamed_access` (see core.access.plan_access)."""
    until_ms = plan.selection.until_ms
    saved_json = plan.archive.access_at(until_ms)
    saved = AccessState.from_json(saved_json) if saved_json is not None else AccessState((), ())
    renames = {source: target for source, target in plan.topic_map.items() if source != target}
    passwords = scram_passwords(passwords_file, environ, {u.name for u in saved.scram_users or ()})
    access = plan_access(saved, target_access(job.kafka), renames, passwords, merge, add_mechanisms=add_mechanisms,
                         accept_renamed_access=accept_renamed_access)
    if saved_json is None:
        when = f" at or before --until {iso(until_ms)}" if until_ms is not None else ""
        access.notes.append(f"the backup saved no ACLs or SCRAM users{when} (the cluster had none, or its backups "
                            "predate them): none are restored")
    for part, name in (("acls", "ACLs"), ("scram_users", "SCRAM users")):
        if saved_json is not None and part not in saved_json:
            access.notes.append(f"the backup could not read the cluster's {name} (see its warnings): none are restored")
    access.notes.append(QUOTAS_NOT_SAVED)
    return access

