"""A schema registry over its Confluent-compatible REST API (issue #52): read it whole, register into it.

Calls (Confluent's Schema Registry API reference, docs.confluent.io, "Schema Registry API
Reference"; Apicurio, Karapace and Redpanda serve the same under their compatibility paths,
e.g. Apicurio's `/apis/ccompat/v7`): GET /subjects?deleted=true, /subjects/S/versions?deleted=true,
/subjects/S/versions/N?deleted=true, /config, /config/S, /mode, /mode/S, /schemas/ids/I;
POST /subjects/S/versions to register.

Apicurio answers 404 to GET /subjects/S/versions/N?deleted=true for a soft-deleted subject;
its own API (/apis/registry/v3) still names each version's contentId, which is the id its
ccompat API gives, and /schemas/ids/I then gives the schema: that fallback is taken only for
such a 404 and only where the URL is an Apicurio ccompat one.

Settings (the `[schema_registries.NAME]` profile section or TOPICVAULT_SCHEMA_REGISTRY_* in core.profiles):
`basic_auth_user` + `basic_auth_password`, or `bearer_token`; `ca_file` (a CA bundle to trust),
`cert_file` + `key_file` (a client certificate). Passwords and tokens are secrets: never printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from ..errors import TopicvaultError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30.0
APICURIO_CCOMPAT = "/apis/ccompat/v7"
SETTINGS = ("basic_auth_user", "basic_auth_password", "bearer_token", "ca_file", "cert_file", "key_file")


class RegistryError(TopicvaultError):
    """The schema registry refused a call or could not be reached (the message names the call)."""


@dataclass
class RegistryClient:
    """One registry: its API's base URL and the settings above."""

    url: str
    settings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.settings) - set(SETTINGS))
        if unknown:
            raise TopicvaultError(f"unknown schema-registry setting(s) {', '.join(unknown)}: use "
                                  f"{', '.join(SETTINGS)}")
        if not self.url.startswith(("http://", "https://")):
            raise TopicvaultError(f"--schema-registry {shown_url(self.url)} is no http:// or https:// URL: give the "
                                  "registry's Confluent-compatible API, e.g. http://registry:8081")
        self.url = self.url.rstrip("/")
        self._session = requests.Session()
        self._session.headers["Accept"] = CONTENT_TYPE
        user, password = self.settings.get("basic_auth_user"), self.settings.get("basic_auth_password")
        if user is not None:
            self._session.auth = (user, password or "")
        if self.settings.get("bearer_token"):
            self._session.headers["Authorization"] = f"Bearer {self.settings['bearer_token']}"
        if self.settings.get("ca_file"):
            self._session.verify = self.settings["ca_file"]
        if self.settings.get("cert_file"):
            self._session.cert = (self.settings["cert_file"], self.settings.get("key_file"))

    def call(self, method: str, path: str, body: dict | None = None, missing_ok: bool = False,
             base: str | None = None) -> object:
        """One API call (to `base` + `path`, by default this registry's API); its JSON answer (None
        for a 404 when `missing_ok`). RegistryError naming the call and the registry's message when it fails."""
        headers = {"Content-Type": CONTENT_TYPE} if body is not None else {}
        if base is not None:  # another API of the same server (Apicurio's own): plain JSON
            headers["Accept"] = "application/json"
        try:
            answer = self._session.request(method, (base or self.url) + path, json=body, timeout=TIMEOUT_S,
                                           headers=headers)
        except requests.RequestException as exc:
            raise RegistryError(f"schema registry {shown_url(self.url)}: {method} {path} failed ({type(exc).__name__}): "
                                "check the URL and that the registry is up") from None
        if answer.status_code == 404 and missing_ok:
            return None
        if answer.status_code >= 400:
            raise RegistryError(f"schema registry {shown_url(self.url)}: {method} {path} answered {answer.status_code} "
                                f"({_message(answer)}): check the URL and the credentials")
        try:
            return answer.json()
        except ValueError:
            raise RegistryError(f"schema registry {shown_url(self.url)}: {method} {path} answered no JSON: is the URL the "
                                "registry's Confluent-compatible API?") from None

    def read_all(self) -> dict:
        """The whole registry in the saved form of formats.saved_registry (subjects soft-deleted
        too, every version with id, type, text and references, global and per-subject config and mode)."""
        live = set(self.call("GET", "/subjects"))
        subjects = {}
        for name in sorted(self.subjects()):
            subjects[name] = self._read_subject(name, deleted=name not in live)
        return {"config": _level(self.call("GET", "/config", missing_ok=True)),
                "mode": _mode(self.call("GET", "/mode", missing_ok=True)), "subjects": subjects}

    def _read_subject(self, name: str, deleted: bool) -> dict:
        path = f"/subjects/{subject_segment(name)}"
        live = set(self.call("GET", f"{path}/versions", missing_ok=True) or ())
        versions = []
        for number in self.call("GET", f"{path}/versions?deleted=true"):
            read = self.call("GET", f"{path}/versions/{number}?deleted=true", missing_ok=True)
            if read is None:
                read = self._apicurio_version(name, number)
            versions.append({"version": int(number), "id": int(read["id"]),
                             "schemaType": read.get("schemaType", "AVRO"), "schema": read["schema"],
                             "references": read.get("references", []), "deleted": number not in live})
        return {"deleted": deleted, "versions": versions,
                "config": _level(self.call("GET", f"/config/{subject_segment(name)}", missing_ok=True)),
                "mode": _mode(self.call("GET", f"/mode/{subject_segment(name)}", missing_ok=True))}

    def _apicurio_version(self, name: str, number: int) -> dict:
        """A soft-deleted subject's version on Apicurio (see the module doc)."""
        if not self.url.endswith(APICURIO_CCOMPAT):
            raise RegistryError(f"schema registry {shown_url(self.url)}: version {number} of subject {name!r} cannot be read")
        native = self.url[: -len(APICURIO_CCOMPAT)] + "/apis/registry/v3"
        listed = self.call("GET", f"/groups/default/artifacts/{subject_segment(name)}/versions?limit=1000", base=native)
        content_id = next(int(v["contentId"]) for v in listed["versions"] if str(v["version"]) == str(number))
        schema = self.call("GET", f"/schemas/ids/{content_id}")
        return {**schema, "id": content_id}

    def register(self, subject: str, version: dict, references: list[dict], schema_id: int | None = None) -> int:
        """Register one saved version under `subject` with `references` (as the target numbers their
        versions), asking for `schema_id` when given (a registry in IMPORT mode may honour it); the
        id the registry answers (compare it: some ignore the one asked for)."""
        body = {"schema": version["schema"], "schemaType": version["schemaType"], "references": references}
        if schema_id is not None:
            body["id"] = schema_id
        return int(self.call("POST", f"/subjects/{subject_segment(subject)}/versions", body)["id"])

    def version_of(self, subject: str, version: dict, references: list[dict]) -> int:
        """The version number `subject` holds the saved `version`'s schema under (POST /subjects/S)."""
        body = {"schema": version["schema"], "schemaType": version["schemaType"], "references": references}
        return int(self.call("POST", f"/subjects/{subject_segment(subject)}", body)["version"])

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        """PUT /config (or /config/S): the compatibility level."""
        self.call("PUT", "/config" + (f"/{subject_segment(subject)}" if subject is not None else ""), {"compatibility": level})

    def set_mode(self, mode: str, subject: str | None = None) -> None:
        """PUT /mode (or /mode/S)."""
        self.call("PUT", "/mode" + (f"/{subject_segment(subject)}" if subject is not None else ""), {"mode": mode})

    def subjects(self) -> list[str]:
        """Every subject this registry holds, soft-deleted ones too (GET /subjects?deleted=true)."""
        return [str(name) for name in self.call("GET", "/subjects?deleted=true")]

    def versions(self, subject: str, deleted: bool = True) -> list[int] | None:
        """The version numbers `subject` holds on this registry, soft-deleted ones too (unless not
        `deleted`); None when it holds none."""
        found = self.call("GET", f"/subjects/{subject_segment(subject)}/versions" + ("?deleted=true" if deleted else ""),
                          missing_ok=True)
        return [int(number) for number in found] if found else None

    def lookup(self, subject: str, version: dict, references: list[dict]) -> tuple[int, int] | None:
        """(version number, id) `subject` holds the saved `version`'s schema under, soft-deleted
        too (POST /subjects/S?deleted=true); None when it holds it under none."""
        body = {"schema": version["schema"], "schemaType": version["schemaType"], "references": references}
        found = self.call("POST", f"/subjects/{subject_segment(subject)}?deleted=true", body, missing_ok=True)
        return (int(found["version"]), int(found["id"])) if isinstance(found, dict) else None

    def mode(self) -> str | None:
        """The global mode (GET /mode); None when the registry has none."""
        return _mode(self.call("GET", "/mode", missing_ok=True))

    def soft_delete(self, subject: str, version: int | None = None) -> None:
        """DELETE /subjects/S (or one version of it): soft, as the saved registry had it."""
        self.call("DELETE", f"/subjects/{subject_segment(subject)}" + (f"/versions/{version}" if version is not None else ""))


def subject_segment(subject: str) -> str:
    """`subject` as one path segment of a REST call: percent-encoded (`/`, `?`, `#`, `%` too).
    RegistryError for "", "." and "..": HTTP clients resolve those as dot segments (RFC 3986
    5.2.4), so `/config/.` would reach `/config/`, the global one, and `/subjects/..` another path."""
    if subject in ("", ".", ".."):
        raise RegistryError(f"schema registry subject {subject!r} cannot be named in a URL: it is no subject name")
    return quote(subject, safe="")


def shown_url(url: str) -> str:
    """`url` fit to print: a user and password in it (http://user:pass@host) shown as ***."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _message(answer: requests.Response) -> str:
    try:
        return str(answer.json().get("message", ""))[:300]
    except (ValueError, AttributeError):
        return answer.reason or ""


def _level(answer: object) -> str | None:
    return answer.get("compatibilityLevel") or answer.get("compatibility") if isinstance(answer, dict) else None


def _mode(answer: object) -> str | None:
    return answer.get("mode") if isinstance(answer, dict) else None
