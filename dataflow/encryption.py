"""Secrets at rest: every stored secret (a connection's URL and password, a flow's options
declared secret, its webhook, and the copies of them a run keeps) is encrypted with
Fernet (``cryptography``) under the keys of ``DATAFLOW_SECRET_KEYS``, as Airflow encrypts
its connections under ``fernet_key``: the first key encrypts, every key decrypts (a
``MultiFernet``), so a new key is put first, ``flowctl rotate-secrets`` re-encrypts every
stored secret with it, and the old key can then go (docs/deployment.md, "Secret keys").

The model fields below do it where the row is read and written: a secret is clear in
memory and sealed (``fernet:`` and a Fernet token) in the database. One that none of the
keys decrypts is read as a ``Sealed`` string, the stored text unchanged: saving its row
again writes it back as it was, and a run that needs it fails saying which secret and
which setting to fix (``undecryptable_fields``), never with anything in clear.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

from source_support.errors import ConfigError
from source_support.registry import section_options

SETTING = "DATAFLOW_SECRET_KEYS"
PREFIX = "fernet:"
#: A sealed secret as stored: the prefix and a Fernet token (version byte 0x80 and a
#: timestamp whose high bytes are 0 until 2106, hence ``gAAAAA``).
SEALED_RE = re.compile(r"fernet:gAAAAA[A-Za-z0-9_-]+={0,2}")
#: Where a key is made when the setting is not given (dataflow/settings.py).
KEY_FILE = "dataflow_secret_key"
#: The JSON fields that hold secrets, and where (``SealedJSONField.secrets``).
JSON_SECRETS = ("source", "format", "sink", "notify", "spec")
#: How deep in a JSON value secrets are sealed, and so looked for: a run's spec holds them
#: at ``spec["source_config"]["url"]`` (depth 2). Deeper values (a user's nested lists,
#: which validation bounds) are not walked.
SECRET_DEPTH = 4


class Sealed(str):
    """Text as the database holds it, sealed: written back unchanged, never sealed again.
    Read from a row, it is a secret that none of the keys decrypts."""


class SecretUndecryptable(ConfigError):
    """Stored secrets that none of the keys of ``DATAFLOW_SECRET_KEYS`` decrypts: ``field``
    names the first of them; the message says whose they are and which setting to fix. A
    run that meets it fails at once (every retry would meet it too)."""


def secret_keys() -> tuple[str, ...]:
    """The keys of ``DATAFLOW_SECRET_KEYS`` (a list; a string is read as comma-separated)."""
    keys = getattr(settings, SETTING, None) or ()
    if isinstance(keys, str):
        keys = keys.split(",")
    keys = tuple(str(key).strip() for key in keys if str(key).strip())
    if not keys:
        raise ImproperlyConfigured(
            f"{SETTING} is empty: give it a list of Fernet keys (the first encrypts, all decrypt); "
            'make one with: python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
        )
    return keys


@functools.lru_cache(maxsize=8)
def _box(keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for number, key in enumerate(keys, 1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            # The key itself is never named: it is a secret too.
            raise ImproperlyConfigured(
                f"{SETTING}: key {number} of {len(keys)} is not a Fernet key (32 bytes, url-safe "
                "base64-encoded: 44 characters); make one with Fernet.generate_key()"
            ) from None
    return MultiFernet(fernets)


def keys_check() -> None:
    """Refuses (ImproperlyConfigured naming the setting and the key's position) keys that
    are missing or not Fernet keys."""
    _box(secret_keys())


def seal(text: str) -> Sealed:
    """``text`` encrypted with the first key, as stored."""
    if isinstance(text, Sealed):
        return text
    return Sealed(PREFIX + _box(secret_keys()).encrypt(text.encode()).decode())


def is_sealed(value: object) -> bool:
    """Whether ``value`` is a secret as stored (sealed), not clear text."""
    return isinstance(value, str) and SEALED_RE.fullmatch(value) is not None


def unseal(stored: str) -> str:
    """The clear text of a stored secret; a ``Sealed`` string (the stored text) if none of
    the keys decrypts it. Text that is not sealed (stored before secrets were) is returned
    as it is."""
    if not is_sealed(stored):
        return stored
    try:
        return _box(secret_keys()).decrypt(stored[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        return Sealed(stored)


def unsealed_json(value: Any, depth: int = 0) -> Any:
    """``value`` (JSON) with every sealed string in it (down to ``SECRET_DEPTH``) decrypted
    (see ``unseal``)."""
    if depth > SECRET_DEPTH:
        return value
    if isinstance(value, dict):
        return {key: unsealed_json(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [unsealed_json(item, depth + 1) for item in value]
    if isinstance(value, str):
        return unseal(value)
    return value


def undecryptable_fields(value: Any, path: str = "", depth: int = 0) -> Iterator[str]:
    """The paths (``source_config.url``) of the secrets in ``value`` (read from a row, down
    to ``SECRET_DEPTH``) that none of the keys decrypts."""
    if isinstance(value, Sealed):
        yield path
    elif depth >= SECRET_DEPTH:
        return
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from undecryptable_fields(item, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from undecryptable_fields(item, f"{path}[{index}]", depth + 1)


def undecryptable_message(what: str, fields: list[str] | tuple[str, ...]) -> str:
    """What a run, a command or a page says of secrets that cannot be decrypted: which ones,
    that the keys do not decrypt them, and which setting to fix."""
    named = ", ".join(fields)
    return (
        f"{what}: {named} cannot be decrypted with any key of {SETTING} (it was encrypted with "
        f"another key); put that key in {SETTING} (when the setting is not given, the key made "
        f"in the var directory's {KEY_FILE} file is used), see docs/deployment.md, 'Secret keys'"
    )


#: A run's spec's keys as a flow's TOML names them.
SPEC_SECTIONS = {"source_config": "source", "format_options": "format", "sink_config": "sink"}


def secrets_check(values: dict[str, Any], *, what: str, field: str = "") -> None:
    """Refuses (SecretUndecryptable) ``values`` read from rows (``{"url": ..., "password":
    ...}``, a run's spec) if a secret in them cannot be decrypted: ``what`` says whose they
    are (``connection 'orders-redis'``); the error's field is ``field``, or the first of them."""
    fields = []
    for path in undecryptable_fields(values):
        head, dot, rest = path.partition(".")
        fields.append(f"{SPEC_SECTIONS.get(head, head)}{dot}{rest}")
    if fields:
        fields.sort()
        raise SecretUndecryptable(field or fields[0], undecryptable_message(what, fields))


def secret_option_names(section: str, type_name: object) -> tuple[str, ...]:
    """The options of a ``source``, ``format`` or ``sink`` type that are secrets."""
    return tuple(option.name for option in section_options(section, type_name) if option.secret)


def sealed_config(config: Any, names: tuple[str, ...]) -> Any:
    """A copy of ``config`` (a table) with the values of ``names`` sealed."""
    if not isinstance(config, dict):
        return config
    sealed = dict(config)
    for name in names:
        value = sealed.get(name)
        if isinstance(value, str) and value:
            sealed[name] = seal(value)
    return sealed


def sealed_section(section: str, type_name: object, config: Any) -> Any:
    """A ``source``, ``format`` or ``sink`` table of ``type_name`` with its secrets sealed."""
    return sealed_config(config, secret_option_names(section, type_name))


def sealed_notify(notify: Any) -> Any:
    """A ``[notify]`` table with its webhook (which may carry a token) sealed."""
    return sealed_config(notify, ("webhook",))


def sealed_spec(spec: Any) -> Any:
    """A run's spec (what ``flow_spec_validate`` returned) with every secret in it sealed."""
    if not isinstance(spec, dict):
        return spec
    sealed = dict(spec)
    for section, key in (("source", "source_config"), ("format", "format_options"), ("sink", "sink_config")):
        if key in sealed:
            sealed[key] = sealed_section(section, spec.get(f"{section}_type"), sealed[key])
    if "notify" in sealed:
        sealed["notify"] = sealed_notify(sealed["notify"])
    return sealed


def sealed_json_of(kind: str, instance: Any, value: Any) -> Any:
    """``value`` of a ``SealedJSONField`` of ``kind`` on ``instance`` (None: not known)
    with its secrets sealed. A section's type is the instance's (``source_type``)."""
    if kind == "spec":
        return sealed_spec(value)
    if kind == "notify":
        return sealed_notify(value)
    if instance is None:
        raise ValueError(f"a {kind} config is sealed by its row's {kind}_type: save the row")
    return sealed_section(kind, getattr(instance, f"{kind}_type", None), value)


class SealedTextField(models.TextField):
    """Text that is a secret: sealed in the database, clear in memory (``Sealed`` if no key
    decrypts it). An empty value is stored empty (no secret)."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return unseal(value) if isinstance(value, str) and value else value

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if isinstance(value, str) and value:
            return seal(value)
        return value


class SealedJSONField(models.JSONField):
    """JSON that holds secrets: ``secrets`` says where (``JSON_SECRETS``): the options of
    the row's ``source``, ``format`` or ``sink`` type that are secrets, a ``notify``
    table's webhook, or every one of a run's ``spec``. They are sealed as the row is saved
    (and, for ``notify`` and ``spec``, which say where their secrets are, by ``update()``
    too); every sealed string is decrypted as the row is read."""

    def __init__(self, *args: Any, secrets: str = "spec", **kwargs: Any) -> None:
        if secrets not in JSON_SECRETS:
            raise ValueError(f"secrets must be one of {JSON_SECRETS}, not {secrets!r}")
        self.secrets = secrets
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["secrets"] = self.secrets
        return name, path, args, kwargs

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return unsealed_json(super().from_db_value(value, expression, connection))

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        return sealed_json_of(self.secrets, model_instance, super().pre_save(model_instance, add))

    def get_prep_value(self, value: Any) -> Any:
        if self.secrets in ("spec", "notify"):
            value = sealed_json_of(self.secrets, None, value)
        return super().get_prep_value(value)


def sealed_fields(model: type[models.Model]) -> list[models.Field]:
    """The fields of ``model`` that hold secrets."""
    return [
        field for field in model._meta.concrete_fields if isinstance(field, SealedTextField | SealedJSONField)
    ]


def field_sealed(field: models.Field, instance: models.Model) -> Any:
    """The value of ``field`` of ``instance`` as it is to be stored: its secrets sealed with
    the first key (``Sealed`` ones, which no key decrypts, as they are)."""
    value = getattr(instance, field.attname)
    if isinstance(field, SealedJSONField):
        return sealed_json_of(field.secrets, instance, value)
    return seal(value) if isinstance(value, str) and value else value


def count_sealed(value: Any, depth: int = 0) -> int:
    """How many sealed secrets ``value`` (a field's value as stored) holds."""
    if isinstance(value, Sealed):
        return 1
    if depth >= SECRET_DEPTH:
        return 0
    if isinstance(value, dict):
        return sum(count_sealed(item, depth + 1) for item in value.values())
    if isinstance(value, list):
        return sum(count_sealed(item, depth + 1) for item in value)
    return 0
