"""Secrets in config and in text: typed so they print masked, and redacted wherever text
leaves the process (logs, ``check`` / ``stats`` output).

Two layers, because SDK error messages carry endpoints and connection strings we never typed:

- Config values that are secrets are ``SecretStr`` (tokens, keys, connection strings) or
  ``SecretUrl`` (URLs that may hold ``user:password@``): printing them shows no secret.
- ``redact(text)`` masks credentials inside any text: userinfo passwords in URLs, the key
  fields of connection strings and SAS tokens, and every secret value of the loaded config
  (``remember_secrets``). The log processors and the CLI's error output call it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, BaseModel, PlainSerializer, SecretStr

__all__ = ["CredentialUrl", "SecretUrl", "mask_field", "redact", "remember_secrets",
           "secret_values"]

MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^\s:/@]*):[^\s/@]*@")
_KEY_FIELDS = re.compile(
    r"(?P<key>\b(?:SharedAccessKey|AccountKey|SharedAccessSignature|sig|password|pwd|"
    r"AccessKey|SecretAccessKey|token)\s*[=:]\s*)(?P<value>[^;&\s,'\"]+)",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"password|secret|token|credential|connectionstring|key$",
                          re.IGNORECASE)
_known: set[str] = set()


class SecretUrl(SecretStr):
    """A URL that may carry ``user:password@``: shown with the password masked, the rest kept
    (the host is what an operator needs to debug)."""

    def _display(self) -> str:
        return mask_url(self.get_secret_value())


def _parseable(value: SecretUrl) -> SecretUrl:
    """A URL urllib cannot split (``redis://[]:6379``) is refused at load, with a message
    that does not echo it: masking it later would fail instead."""
    try:
        urlsplit(value.get_secret_value())
    except ValueError:
        raise ValueError("not a URL (its host cannot be parsed)") from None
    return value


CredentialUrl = Annotated[SecretUrl, AfterValidator(_parseable),
                          PlainSerializer(str, return_type=str, when_used="json")]
"""``SecretUrl`` that also dumps to JSON masked-but-readable (not as ``**********``)."""


def mask_url(url: str) -> str:
    """``user:***@`` for a password; a user alone (``https://TOKEN@host``, a token) is masked
    whole."""
    parts = urlsplit(url)
    if parts.password is None and not parts.username:
        return url
    host = parts.hostname or ""
    user = MASK if parts.password is None else f"{parts.username or ''}:{MASK}"
    port: int | str | None
    try:
        port = parts.port
    except ValueError:  # not a number: the field's own check names it; keep the text as is
        port = parts.netloc.rpartition("@")[2].rpartition(":")[2] or None
    netloc = f"{user}@{host}" + (f":{port}" if port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def redact(text: str) -> str:
    """``text`` with credentials masked (see the module docstring)."""
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(rf"\g<scheme>\g<user>:{MASK}@", text)
    return _KEY_FIELDS.sub(rf"\g<key>{MASK}", text)


def mask_field(name: str, value: str) -> str:
    """A named setting's value as shown, where no type says it is a secret (a Dapr
    component's plain metadata): masked whole when its name says so (``redisPassword``,
    ``secretKey``, ``sessionToken``, ``connectionString``), else ``redact``-ed. An empty
    value stays empty: that it is unset is no secret, and is often the problem."""
    return MASK if value and _SECRET_NAME.search(name) else redact(value)


def secret_values(model: BaseModel) -> list[str]:
    """Every non-empty secret value inside ``model`` (nested models, tuples, dicts)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            if isinstance(value, SecretUrl):
                password = urlsplit(secret).password
                secret = password or ""
            if secret:
                found.append(secret)
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name))
            for extra in (value.model_extra or {}).values():
                walk(extra)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(model)
    return found


def remember_secrets(values: Iterable[str]) -> None:
    """Secrets ``redact`` masks verbatim from now on (the loaded config's)."""
    _known.update(value for value in values if len(value) >= 4)
