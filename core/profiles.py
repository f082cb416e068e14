"""Named clusters and stores from `topicvault.toml`, with TOPICVAULT_* environment overrides.

Precedence, highest first: command-line flags, environment variables, the profile, defaults.

    [clusters.prod]
    bootstrap_servers = "broker-1:9092,broker-2:9092"
    [clusters.prod.properties]
    "security.protocol" = "SASL_SSL"
    "sasl.mechanism" = "SCRAM-SHA-512"
    "sasl.username" = "backup"
    "sasl.password" = "${KAFKA_PASSWORD}"      # taken from the environment when used
    [clusters.prod.schema_registry]             # backup/restore --schema-registry (core.cluster.registry_client)
    url = "https://registry.internal:8081"
    basic_auth_user = "backup"
    basic_auth_password = "${REGISTRY_PASSWORD}"

    [stores.archive]
    uri = "s3://kafka-archive/prod"
    endpoint_url = "https://minio.internal:9000"
    region = "us-east-1"
    path_style = "true"

Environment: TOPICVAULT_CONFIG (file), TOPICVAULT_BOOTSTRAP_SERVERS, TOPICVAULT_STORE_URI,
TOPICVAULT_KAFKA_<PROPERTY> (dots as underscores: TOPICVAULT_KAFKA_SASL_PASSWORD) and
TOPICVAULT_STORE_<OPTION> (TOPICVAULT_STORE_ENDPOINT_URL), TOPICVAULT_ENCRYPTION_KEY,
TOPICVAULT_SCHEMA_REGISTRY_<SETTING> (TOPICVAULT_SCHEMA_REGISTRY_URL, …_BEARER_TOKEN). A store profile's
`encryption_key = "file:///…"` (or a list, the first encrypting) is its client-side key. Secrets are never printed: see `redact`.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from .errors import TopicvaultError

CONFIG_NAME = "topicvault.toml"
# librdkafka properties that run a command or load code (librdkafka's CONFIGURATION.md): taken
# only from the command line (-X), never from a file or the environment, which others may have
# written (a checkout, a CI workspace, a shared host).
CODE_RUNNING_PROPERTIES = {
    "plugin.library.paths": "loads shared libraries",
    "sasl.kerberos.kinit.cmd": "runs a shell command",
    "ssl.engine.location": "loads an OpenSSL engine library",
    "ssl.engine.id": "loads an OpenSSL engine",
    "ssl.providers": "loads OpenSSL provider modules",
}
_SECRET_WORDS = ("password", "secret", "token", "credential", "private")
_SECRET_NAMES = {"sasl.jaas.config", "ssl.key.pem", "ssl.keystore.key"}
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Settings:
    """Where the cluster and the backup location are, after every source was applied."""

    bootstrap_servers: str | None = None
    kafka_properties: dict[str, str] = field(default_factory=dict)
    store_uri: str | None = None
    store_options: dict[str, str] = field(default_factory=dict)
    # Client-side encryption keys (core.crypto specs): the store profile's `encryption_key`
    # (a string or a list), TOPICVAULT_ENCRYPTION_KEY (comma-separated), or --encryption-key.
    encryption_keys: tuple[str, ...] = ()
    # The schema registry (--schema-registry, the cluster profile's `schema_registry` table or
    # TOPICVAULT_SCHEMA_REGISTRY_*): its URL and settings (core.cluster.registry_client.SETTINGS).
    schema_registry_url: str | None = None
    schema_registry_settings: dict[str, str] = field(default_factory=dict)

    def location(self, flag: str) -> str:
        """The backup location's URI; a one-line error naming `flag` (the command's) when none was given."""
        if not self.store_uri:
            raise TopicvaultError(f"no backup location given: pass {flag}, --store NAME or set TOPICVAULT_STORE_URI")
        return self.store_uri

    def store_option_pairs(self) -> tuple[tuple[str, str], ...]:
        """The store options as sorted (name, value) pairs, as jobs carry them."""
        return tuple(sorted(self.store_options.items()))

    def keyring(self):
        """The core.crypto.Keyring of the encryption keys (None: none given); an unreadable key file
        or unknown KMS key fails here, before anything else."""
        from .crypto import keyring_of

        return keyring_of(self.encryption_keys)

    def redacted(self) -> dict:
        """For printing: secret values replaced by ***."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_properties": redact(self.kafka_properties),
            "store_uri": self.store_uri,
            "store_options": redact(self.store_options),
            "encryption_keys": list(self.encryption_keys),  # names of keys (paths, KMS ids), never key bytes
            "schema_registry_url": self.schema_registry_url,
            "schema_registry_settings": redact(self.schema_registry_settings),
        }


def is_secret(name: str) -> bool:
    """Whether a setting's value must never be printed."""
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(word in lowered for word in _SECRET_WORDS)


def redact(settings: Mapping[str, str]) -> dict[str, str]:
    """A copy with every secret value replaced by ***."""
    return {name: "***" if is_secret(name) else value for name, value in settings.items()}


_known_secrets: set[str] = set()


def remember_secrets(settings: Mapping[str, str]) -> None:
    """Note the secret values among `settings`, so that `scrub` hides them in any message."""
    _known_secrets.update(str(v) for k, v in settings.items() if is_secret(k) and v)


def scrub(text: str) -> str:
    """`text` with every remembered secret value replaced by ***: for errors that quote a setting."""
    for secret in sorted(_known_secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _flatten(table: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Unquoted dotted TOML keys (`security.protocol = …`) arrive as nested tables: join them back."""
    flat: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def config_path(explicit: str | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read: --config, TOPICVAULT_CONFIG, ./topicvault.toml, ~/.config/topicvault/."""
    if explicit or env.get("TOPICVAULT_CONFIG"):
        path = Path(explicit or env["TOPICVAULT_CONFIG"]).expanduser()
        if not path.is_file():
            raise TopicvaultError(f"config file {path} does not exist: check --config / TOPICVAULT_CONFIG")
        return path
    for candidate in (Path.cwd() / CONFIG_NAME, Path.home() / ".config" / "topicvault" / CONFIG_NAME):
        if candidate.is_file():
            check_trusted(candidate)
            return candidate
    return None


def check_trusted(path: Path) -> None:
    """Refuse a config file found without being named unless the user owns it and nobody else may write it.

    Whoever can write it chooses the brokers a password is sent to and the files a client loads
    (git refuses a repository another user owns, for the same reason); one named with --config
    or TOPICVAULT_CONFIG is the user's choice.
    """
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise TopicvaultError(f"not reading {path}: it is owned by uid {info.st_uid}, not you (uid {os.geteuid()}); "
                              "name it with --config if you trust it")
    writers = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if info.st_mode & bit]
    if writers:
        raise TopicvaultError(f"not reading {path}: it is writable by {' and '.join(writers)} "
                              f"(mode {stat.S_IMODE(info.st_mode):o}); chmod go-w it, or name it with --config")


def load_config(path: Path | None) -> dict:
    """The parsed config file ({} without one); a syntax error names the file and line."""
    if path is None:
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TopicvaultError(f"config file {path} is not valid TOML: {exc}") from None


def _section(config: dict, kind: str, name: str | None, path: Path | None) -> dict:
    if name is None:
        return {}
    entries = config.get(kind, {})
    if name not in entries:
        where = f"{path}" if path else f"no {CONFIG_NAME} found"
        known = ", ".join(sorted(entries)) or "none"
        raise TopicvaultError(f"no {kind[:-1]} named {name!r} in the config ({where}); defined: {known}")
    return entries[name]


def _expand(value: object, env: Mapping[str, str], setting: str) -> str:
    """A profile value with `${VAR}` replaced from the environment: in secret settings only.

    Only secret values are never printed (redact, scrub) and they are what ${VAR} is for; in any
    other setting a profile could copy any variable (AWS_SECRET_ACCESS_KEY) into a value that is
    printed, logged or sent as a client id.
    """
    def lookup(match: re.Match) -> str:
        if not is_secret(setting):
            raise TopicvaultError(
                f"setting {setting!r} refers to ${{{match.group(1)}}}: the environment is read for secret settings only "
                "(names holding password, secret, token, credential or private); write the value, or use the "
                "TOPICVAULT_* variables (docs/operations.md: Profiles and configuration)")
        if match.group(1) not in env:
            raise TopicvaultError(f"setting {setting!r} refers to ${{{match.group(1)}}}, which is not set in the environment")
        return env[match.group(1)]

    text = str(value).lower() if isinstance(value, bool) else str(value)
    return _ENV_REFERENCE.sub(lookup, text)


def _check_no_code_running(names: Iterable[str], where: str) -> None:
    for name in sorted(names):
        if name in CODE_RUNNING_PROPERTIES:
            raise TopicvaultError(f"{name} in {where} {CODE_RUNNING_PROPERTIES[name]}: it is taken only from the "
                                  f"command line: -X {name}=...")


def _prefixed(env: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {name[len(prefix):].lower().replace("_", "."): value for name, value in env.items() if name.startswith(prefix)}


def parse_properties(pairs: Iterable[str]) -> dict[str, str]:
    """Parse `key=value` strings (CLI `-X`) into a mapping; a bad pair is a one-line error."""
    result: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise TopicvaultError(f"bad property {pair!r}: write it as key=value, e.g. -X security.protocol=SSL")
        result[name.strip()] = value
    return result


def resolve_flags(config_file: str | None, cluster: str | None, store: str | None, bootstrap_servers: str | None,
                  properties: Iterable[str], store_uri: str | None, options: Iterable[str],
                  encryption_keys: Iterable[str] = (), schema_registry_url: str | None = None) -> Settings:
    """resolve() from the command line's flags: -X and -S as key=value pairs (a bad one is a one-line error)."""
    return resolve(config_file=config_file, cluster=cluster, store=store, bootstrap_servers=bootstrap_servers,
                   kafka_properties=parse_properties(list(properties)), store_uri=store_uri,
                   store_options=parse_properties(list(options)), encryption_keys=tuple(encryption_keys),
                   schema_registry_url=schema_registry_url)


def resolve(
    *,
    config_file: str | None = None,
    cluster: str | None = None,
    store: str | None = None,
    bootstrap_servers: str | None = None,
    kafka_properties: Mapping[str, str] | None = None,
    store_uri: str | None = None,
    store_options: Mapping[str, str] | None = None,
    encryption_keys: tuple[str, ...] = (),
    schema_registry_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge flags, environment and profiles (in that order of precedence) into one Settings."""
    env = os.environ if env is None else env
    path = config_path(config_file, env) if (cluster or store or config_file or env.get("TOPICVAULT_CONFIG")) else None
    config = load_config(path)
    cluster_profile = _section(config, "clusters", cluster, path)
    store_profile = _section(config, "stores", store, path)

    registry = {k: _expand(v, env, k) for k, v in _flatten(cluster_profile.get("schema_registry", {})).items()}
    registry.update({k.replace(".", "_"): v for k, v in _prefixed(env, "TOPICVAULT_SCHEMA_REGISTRY_").items()})
    registry_url = schema_registry_url or registry.pop("url", None)
    registry.pop("url", None)
    properties = {k: _expand(v, env, k) for k, v in _flatten(cluster_profile.get("properties", {})).items()}
    typed = set(kafka_properties or {})  # given with -X: the user's own choice, whatever else names it
    _check_no_code_running(properties.keys() - typed, f"the profile {path}")
    from_env = _prefixed(env, "TOPICVAULT_KAFKA_")
    _check_no_code_running(from_env.keys() - typed, "the environment (TOPICVAULT_KAFKA_*)")
    properties.update(from_env)
    properties.update(kafka_properties or {})
    servers = (
        bootstrap_servers
        or env.get("TOPICVAULT_BOOTSTRAP_SERVERS")
        or (_expand(cluster_profile["bootstrap_servers"], env, "bootstrap_servers") if "bootstrap_servers" in cluster_profile else None)
    )

    profile_keys = store_profile.get("encryption_key", [])
    profile_keys = [profile_keys] if isinstance(profile_keys, str) else list(profile_keys)
    keys = (tuple(encryption_keys)
            or tuple(k.strip() for k in env.get("TOPICVAULT_ENCRYPTION_KEY", "").split(",") if k.strip())
            or tuple(_expand(k, env, "encryption_key") for k in profile_keys))
    options = {k: _expand(v, env, k) for k, v in _flatten(store_profile).items() if k not in ("uri", "encryption_key")}
    env_options = _prefixed(env, "TOPICVAULT_STORE_")
    env_uri = env_options.pop("uri", None)
    options.update({k.replace(".", "_"): v for k, v in env_options.items()})
    options.update(store_options or {})
    uri = store_uri or env_uri or (_expand(store_profile["uri"], env, "uri") if "uri" in store_profile else None)
    remember_secrets(properties)
    remember_secrets(options)
    remember_secrets(registry)
    return Settings(servers, properties, uri, options, keys, registry_url, registry)
