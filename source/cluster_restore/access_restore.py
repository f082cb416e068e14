"""ACLs and SCRAM users after a restore (`restore --cluster-state`): the plan from the archive's
saved state (at --until) and the target's own, applied once the topics exist and before any
record is produced (source.restore.restore_job.run_restore), so applications find their rights in place.

Planning reads first (read_cluster_access, from restore.gather_facts), then decides from what it
read alone (plan_cluster_access, from restore_plan.build_restore_plan): the plan holds the result."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ...core.archive.commits import BackupState
from ...core.cluster.cluster_access import AccessPlan, AccessState, plan_access, scram_passwords
from ...core.cluster.cluster_admin import target_access
from ...core.cluster.kafka import KafkaSettings
from ...core.errors import TopicvaultError
from ...core.text import iso

# Said by every --cluster-state restore: a backup cannot know whether the cluster had quotas, as
# no Python client it can use reads them (docs/recovery-runbook.md).
QUOTAS_NOT_SAVED = ("client quotas are not restored (backups cannot read them: confluent-kafka and kafka-python have "
                    "no DescribeClientQuotas): set them on the target again with kafka-configs --alter "
                    "--entity-type users|clients")


@dataclass(frozen=True)
class AccessRequest:
    """restore --cluster-state: restore the archive's ACLs and SCRAM users too, and how."""

    passwords_file: str | None = None  # --scram-passwords: JSON {"user": "password"} (else the environment)
    merge: bool = False  # --merge-acls: keep the target's own ACLs the archive does not hold
    add_mechanisms: bool = False  # --add-scram-mechanisms
    accept_renamed_access: bool = False  # --accept-renamed-access

    @staticmethod
    def of(cluster_state: bool, passwords_file: str | None, merge: bool, add_mechanisms: bool,
           accept_renamed_access: bool) -> AccessRequest | None:
        """restore's --cluster-state and the options that shape it (None: not asked for); the options
        without --cluster-state are refused (one line, before anything is read)."""
        if not cluster_state:
            if passwords_file or merge or add_mechanisms or accept_renamed_access:
                raise TopicvaultError("--scram-passwords, --merge-acls, --add-scram-mechanisms and "
                                      "--accept-renamed-access work with --cluster-state: add --cluster-state")
            return None
        return AccessRequest(passwords_file, merge, add_mechanisms, accept_renamed_access)


def saved_access(archive: BackupState, until_ms: int | None) -> tuple[dict | None, AccessState]:
    """The ACLs and SCRAM users the archive saved at `until_ms` (None: the newest), as saved (None: none
    saved) and parsed (empty where none were)."""
    saved_json = archive.access_at(until_ms)
    return saved_json, AccessState.from_json(saved_json) if saved_json is not None else AccessState((), ())


def read_cluster_access(kafka: KafkaSettings, request: AccessRequest, archive: BackupState, until_ms: int | None,
                        environ: Mapping[str, str] = os.environ) -> tuple[AccessState, dict[str, str]]:
    """What planning --cluster-state reads: the target's ACLs and SCRAM users, and the passwords given
    for the saved users (a one-line error when either cannot be read)."""
    _, saved = saved_access(archive, until_ms)
    passwords = scram_passwords(request.passwords_file, environ, {u.name for u in saved.scram_users or ()})
    return target_access(kafka), passwords


def plan_cluster_access(request: AccessRequest, archive: BackupState, until_ms: int | None, target: AccessState,
                        renames: Mapping[str, str], passwords: Mapping[str, str]) -> AccessPlan:
    """What --cluster-state creates on the target (pure); refuses (one line, before anything is written)
    a target whose ACLs the archive does not hold, unless `request.merge`, and renamed topics whose access
    would differ from their source's, unless `request.accept_renamed_access` (see core.cluster.cluster_access.plan_access)."""
    saved_json, saved = saved_access(archive, until_ms)
    access = plan_access(saved, target, renames, passwords, request.merge, add_mechanisms=request.add_mechanisms,
                         accept_renamed_access=request.accept_renamed_access)
    if saved_json is None:
        when = f" at or before --until {iso(until_ms)}" if until_ms is not None else ""
        access.notes.append(f"the backup saved no ACLs or SCRAM users{when} (the cluster had none, or its backups "
                            "predate them): none are restored")
    for part, name in (("acls", "ACLs"), ("scram_users", "SCRAM users")):
        if saved_json is not None and part not in saved_json:
            access.notes.append(f"the backup could not read the cluster's {name} (see its warnings): none are restored")
    access.notes.append(QUOTAS_NOT_SAVED)
    return access
