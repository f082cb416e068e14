"""Who may do what on a cluster: ACL bindings and SCRAM users, saved by backup, restored by
`restore --cluster-state` (issue 37).

Backup reads them (core.cluster.cluster_admin.read_access) into an AccessState kept in commit records whenever it
changes. Restore reads the target's own (core.cluster.cluster_admin.target_access), plans what to
create (`plan_access`: pure, from those facts, with --rename and the passwords the user
supplied) and applies it (core.cluster.cluster_admin.apply_access) after the topics exist and before any record is produced.

Kafka never returns a SCRAM password or its salted form: an AccessState holds each user's
mechanism and iteration count only, and a user is created on the target only with a password
given to the restore. Client quotas are not saved: confluent-kafka (librdkafka) has no
DescribeClientQuotas/AlterClientQuotas (see docs/recovery-runbook.md).

An archive is untrusted input (docs/threat-model.md): AccessState.from_json accepts only
well-formed bindings and users, and nothing with a secret in it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..errors import TopicvaultError

# What a saved binding may name: the bindable values of confluent-kafka's enums (BROKER is
# Kafka's CLUSTER resource; ANY, MATCH and UNKNOWN are filters, never bindings).
RESOURCE_TYPES = ("TOPIC", "GROUP", "BROKER", "TRANSACTIONAL_ID")
PATTERN_TYPES = ("LITERAL", "PREFIXED")
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
PERMISSIONS = ("ALLOW", "DENY")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
MAX_NAME = 10_000  # longer than any resource, principal or user name a cluster accepts
PASSWORD_ENV_PREFIX = "TOPICVAULT_SCRAM_PASSWORD_"


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, by the names of its parts."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str

    def key(self) -> tuple:
        return (self.resource_type, self.name, self.pattern_type, self.principal, self.host, self.operation,
                self.permission)

    def to_json(self) -> dict:
        return dict(zip(("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"),
                        self.key()))

    @classmethod
    def from_json(cls, body: Mapping) -> "Acl":
        """A binding from an archive; ValueError naming the part that is not one Kafka binds."""
        acl = cls(*(_text(body, part) for part in ("resource_type", "name", "pattern_type", "principal", "host",
                                                   "operation", "permission")))
        for part, allowed in (("resource_type", RESOURCE_TYPES), ("pattern_type", PATTERN_TYPES),
                              ("operation", OPERATIONS), ("permission", PERMISSIONS)):
            if getattr(acl, part) not in allowed:
                raise ValueError(f"ACL {part} {getattr(acl, part)!r} is not one of {', '.join(allowed)}")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*:.+", acl.principal, re.S):
            raise ValueError(f"ACL principal {acl.principal!r} is not of the form Type:name")
        return acl

    def describe(self) -> str:
        where = f"prefixed {self.name!r}" if self.pattern_type == "PREFIXED" else repr(self.name)
        host = "" if self.host == "*" else f" from {self.host}"
        return f"{self.permission} {self.principal} {self.operation} on {self.resource_type} {where}{host}"


@dataclass(frozen=True, order=True)
class ScramUser:
    """One SCRAM credential of a user: its mechanism and iterations (Kafka never returns the password)."""

    name: str
    mechanism: str
    iterations: int

    def to_json(self) -> dict:
        return {"name": self.name, "mechanism": self.mechanism, "iterations": self.iterations}

    @classmethod
    def from_json(cls, body: Mapping) -> "ScramUser":
        """A credential from an archive; ValueError when malformed or when it holds anything secret."""
        if not isinstance(body, Mapping) or set(body) != {"name", "mechanism", "iterations"}:
            raise ValueError(f"SCRAM user entry must hold name, mechanism and iterations only (no password or "
                             f"salt), not {sorted(body) if isinstance(body, Mapping) else type(body).__name__}")
        user = cls(_text(body, "name"), _text(body, "mechanism"), body["iterations"])
        if user.mechanism not in MECHANISMS:
            raise ValueError(f"SCRAM mechanism {user.mechanism!r} is not one of {', '.join(MECHANISMS)}")
        if type(user.iterations) is not int or not MIN_ITERATIONS <= user.iterations <= MAX_ITERATIONS:
            raise ValueError(f"SCRAM iterations {user.iterations!r} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        return user

    def describe(self) -> str:
        return f"{self.name} ({self.mechanism}, {self.iterations} iterations)"


def _text(body: Mapping, part: str) -> str:
    value = body.get(part) if isinstance(body, Mapping) else None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise ValueError(f"{part} must be a non-empty string, not {str(value)[:80]!r}")
    return value


@dataclass(frozen=True)
class AccessState:
    """A cluster's ACL bindings and SCRAM users; a part is None when it could not be read."""

    acls: tuple[Acl, ...] | None = None
    scram_users: tuple[ScramUser, ...] | None = None

    def to_json(self) -> dict:
        """The form kept in commit records (sorted: an unchanged cluster gives identical JSON)."""
        body: dict = {}
        if self.acls is not None:
            body["acls"] = [a.to_json() for a in sorted(set(self.acls))]
        if self.scram_users is not None:
            body["scram_users"] = [u.to_json() for u in sorted(set(self.scram_users))]
        return body

    @classmethod
    def from_json(cls, body: object) -> "AccessState":
        """Read (and check) the commit-record form; ValueError when it is not one."""
        if not isinstance(body, Mapping) or set(body) - {"acls", "scram_users"}:
            raise ValueError("access must be an object of acls and scram_users")
        parts = {}
        for part, kind in (("acls", Acl), ("scram_users", ScramUser)):
            if part in body:
                if not isinstance(body[part], list):
                    raise ValueError(f"access {part} must be a list")
                parts[part] = tuple(kind.from_json(entry) for entry in body[part])
        return cls(**parts)

    def summary(self) -> str:
        acls = "ACLs not read" if self.acls is None else f"{len(self.acls)} ACL binding{'s' * (len(self.acls) != 1)}"
        if self.scram_users is None:
            return f"{acls}, SCRAM users not read"
        names = sorted({u.name for u in self.scram_users})
        return f"{acls}, {len(names)} SCRAM user{'s' * (len(names) != 1)}" + (f" ({', '.join(names)})" if names else "")


def check_access_json(body: object) -> dict:
    """`body` if it is a well-formed access state (commit records are read through this)."""
    AccessState.from_json(body)
    return dict(body)  # type: ignore[arg-type]


def changed_access(saved: Mapping, now: Mapping | None) -> dict | None:
    """The parts of `now` (AccessState.to_json of a cluster) that differ from `saved` (what the
    archive holds, BackupState.access), for the next commit; a part never saved counts as empty,
    so a cluster without ACLs or users adds nothing. None: nothing to save."""
    changed = {part: value for part, value in (now or {}).items() if saved.get(part, []) != value}
    return changed or None


Grant = tuple[str, str, str, str]  # (principal, host, operation, permission) of a binding


def topic_access(acls: Iterable[Acl], topic: str) -> frozenset[Grant]:
    """Who may or may not do what on `topic`, as Kafka's authorizer matches bindings: every TOPIC
    binding LITERAL on its name or on `*`, or PREFIXED on a prefix of it."""
    return frozenset((a.principal, a.host, a.operation, a.permission) for a in acls
                     if a.resource_type == "TOPIC"
                     and ((a.pattern_type == "LITERAL" and a.name in (topic, "*"))
                          or (a.pattern_type == "PREFIXED" and topic.startswith(a.name))))


@dataclass(frozen=True)
class AccessChange:
    """How a renamed topic's effective access differs from its source topic's."""

    source: str
    target: str
    gained: tuple[Grant, ...]  # apply to the target name, not to the source name
    lost: tuple[Grant, ...]  # applied to the source name, not to the target name

    def describe(self) -> str:
        """One line: the two names and every grant or denial that differs."""
        def shown(grants: tuple[Grant, ...]) -> str:
            return ", ".join(f"{permission} {principal} {operation}" + ("" if host == "*" else f" from {host}")
                             for principal, host, operation, permission in grants)
        parts = ([f"gains {shown(self.gained)}"] if self.gained else []) + \
                ([f"loses {shown(self.lost)}"] if self.lost else [])
        return f"{self.source} -> {self.target}: {'; '.join(parts)}"


def renamed_access_changes(source_acls: Iterable[Acl], target_acls: Iterable[Acl],
                           renames: Mapping[str, str]) -> list[AccessChange]:
    """Each renamed topic whose access under `target_acls` differs from its source's under
    `source_acls` (a prefixed or wildcard binding changes meaning when a topic changes name)."""
    source_acls, target_acls = tuple(source_acls), tuple(target_acls)
    changes = []
    for source, target in sorted(renames.items()):
        before, after = topic_access(source_acls, source), topic_access(target_acls, target)
        if before != after:
            changes.append(AccessChange(source, target, tuple(sorted(after - before)), tuple(sorted(before - after))))
    return changes


@dataclass
class AccessPlan:
    """What `restore --cluster-state` does to the target's access, from the facts read first."""

    create_acls: list[Acl] = field(default_factory=list)
    conflicting_acls: list[Acl] = field(default_factory=list)  # the target's own, kept with --merge-acls
    create_users: list[ScramUser] = field(default_factory=list)
    users_present: list[ScramUser] = field(default_factory=list)  # on the target already: left as they are
    # Saved credentials of users the target has under another mechanism only: left out (no --add-scram-mechanisms).
    mechanisms_not_added: list[ScramUser] = field(default_factory=list)
    renamed_access: list[AccessChange] = field(default_factory=list)  # accepted with --accept-renamed-access
    users_without_password: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what --rename did to ACLs
    passwords: dict[str, str] = field(default_factory=dict, repr=False)  # never printed nor saved


def renamed_acls(acls: Iterable[Acl], renames: Mapping[str, str]) -> tuple[list[Acl], list[str]]:
    """The archive's bindings for a restore that renames topics, and a note for each change.

    A literal binding on a renamed topic moves to its new name. A prefixed one that covered the
    old name stays as saved (it covers other topics) and, when it does not cover the new name, is
    granted on the new name as a literal binding: the restored topic is reachable by exactly the
    principals that reached it before.
    """
    result, notes = [], []
    for acl in sorted(set(acls)):
        if acl.resource_type != "TOPIC" or not renames:
            result.append(acl)
            continue
        if acl.pattern_type == "LITERAL" and acl.name in renames:
            moved = Acl(acl.resource_type, renames[acl.name], *acl.key()[2:])
            result.append(moved)
            notes.append(f"--rename: ACL {acl.describe()} restored as {moved.describe()}")
            continue
        result.append(acl)
        if acl.pattern_type == "PREFIXED":
            for old, new in sorted(renames.items()):
                if old.startswith(acl.name) and not new.startswith(acl.name):
                    granted = Acl(acl.resource_type, new, "LITERAL", *acl.key()[3:])
                    result.append(granted)
                    notes.append(f"--rename: ACL {acl.describe()} covered {old!r}; granted on {new!r} as "
                                 f"{granted.describe()}")
    return sorted(set(result)), notes


def plan_access(saved: AccessState, target: AccessState, renames: Mapping[str, str],
                passwords: Mapping[str, str], merge: bool, *, add_mechanisms: bool = False,
                accept_renamed_access: bool = False) -> AccessPlan:
    """Plan the ACLs and SCRAM users to create on the target (pure).

    The target's bindings the archive does not hold would grant or deny what the archive does
    not say: refused unless `merge`, then kept beside the archive's. A renamed topic whose access
    under the bindings created differs from its source topic's is refused unless
    `accept_renamed_access`. A user the target already has (by name, any mechanism) is left
    alone: a saved mechanism it lacks is added only with `add_mechanisms` (and a password).
    """
    wanted, notes = renamed_acls(saved.acls or (), renames)
    present = set(target.acls or ())
    conflicting = sorted(present - set(wanted))
    if conflicting and not merge:
        shown = "; ".join(a.describe() for a in conflicting[:3]) + ("; ..." if len(conflicting) > 3 else "")
        raise TopicvaultError(
            f"the target already has {len(conflicting)} ACL binding{'s' * (len(conflicting) != 1)} the archive does "
            f"not hold ({shown}): restore into a cluster without them, or add --merge-acls to keep them beside the "
            "archive's")
    # What the target will hold once the plan is applied, against what the source held.
    changes = renamed_access_changes(saved.acls or (), [*wanted, *present], renames)
    if changes and not accept_renamed_access:
        raise TopicvaultError(
            "under --rename the restored ACLs give these topics other access than their source topics had: "
            + " | ".join(c.describe() for c in changes)
            + ": add --accept-renamed-access to restore the ACLs as they are, or set them by hand after a restore "
            "without --cluster-state")
    notes += [f"--accept-renamed-access: {c.describe()}" for c in changes]
    on_target: dict[str, set[str]] = {}
    for user in target.scram_users or ():
        on_target.setdefault(user.name, set()).add(user.mechanism)
    plan = AccessPlan(create_acls=[a for a in wanted if a not in present], conflicting_acls=conflicting, notes=notes,
                      renamed_access=changes)
    for user in sorted(set(saved.scram_users or ())):
        mechanisms = on_target.get(user.name)
        if mechanisms is not None and (user.mechanism in mechanisms or not add_mechanisms):
            # Adding a credential to a user the target has would let the restore's password log in as it.
            (plan.users_present if user.mechanism in mechanisms else plan.mechanisms_not_added).append(user)
        elif user.name in passwords:
            plan.create_users.append(user)
        elif user.name not in plan.users_without_password:
            plan.users_without_password.append(user.name)
    plan.passwords = {u.name: passwords[u.name] for u in plan.create_users}
    return plan


def password_variable(user: str) -> str:
    """The environment variable holding a SCRAM user's password for a restore."""
    return PASSWORD_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", user).upper()


def scram_passwords(path: str | None, environ: Mapping[str, str], users: Iterable[str]) -> dict[str, str]:
    """The passwords the user supplied for `users`: from the JSON file at `path` ({"user":
    "password"}), else from the variable password_variable(user). Never echoes file contents."""
    given: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except OSError as exc:
            raise TopicvaultError(f"cannot read --scram-passwords {path}: {exc.strerror}") from None
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                    for k, v in loaded.items()):
            raise TopicvaultError(f"--scram-passwords {path} must hold one JSON object of user name to password "
                                  '(e.g. {"alice": "..."})')
        given.update(loaded)
    names = sorted(set(users))
    variables: dict[str, list[str]] = {}
    for name in names:
        variables.setdefault(password_variable(name), []).append(name)
    for name in names:
        variable = password_variable(name)
        if name not in given and len(variables[variable]) == 1 and environ.get(variable):
            given[name] = environ[variable]
    return {name: given[name] for name in names if name in given}


@dataclass(frozen=True)
class AccessApplied:
    """What apply_access did."""

    acls_created: int
    users_created: tuple[str, ...]
