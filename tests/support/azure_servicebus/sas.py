"""Shared Access Signature tokens as the SDK builds them and Service Bus checks them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import parse_qs, quote_plus, unquote

from tests.support.azure_servicebus.entities import entity_path


def make_sas_token(audience: str, key_name: str, key: str, ttl_s: int = 3600) -> str:
    """Build a SAS token the way the SDK does (for unit tests that speak raw AMQP)."""
    expiry = int(time.time()) + ttl_s
    encoded = quote_plus(audience)
    signed = f"{encoded}\n{expiry}".encode()
    sig = base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest()).decode()
    return f"SharedAccessSignature sr={encoded}&sig={quote_plus(sig)}&se={expiry}&skn={key_name}"



def verify_sas(token: str, key_name: str, key: str) -> tuple[str, float]:
    """The audience path and expiry of a valid SAS token; ``ValueError`` says what is wrong."""
    prefix = "SharedAccessSignature "
    if not token.startswith(prefix):
        raise ValueError("not a SharedAccessSignature")
    fields = {
        k: v[0] for k, v in parse_qs(token[len(prefix) :], keep_blank_values=True).items()
    }
    try:
        resource, sig, expiry, signer = (
            fields["sr"],
            fields["sig"],
            fields["se"],
            fields["skn"],
        )
    except KeyError as exc:
        raise ValueError(f"missing {exc}") from None
    if signer != key_name:
        raise ValueError(f"unknown key name {signer}")
    signed = f"{quote_plus(resource)}\n{expiry}".encode()
    expected = base64.b64encode(
        hmac.new(key.encode(), signed, hashlib.sha256).digest()
    ).decode()
    if not hmac.compare_digest(expected, sig):
        raise ValueError("signature mismatch")
    if float(expiry) <= time.time():
        raise ValueError("token expired")
    return entity_path(unquote(resource)), float(expiry)
