"""Who may deliver to the MLflow hook: `verify_delivery` checks MLflow's webhook signature.

MLflow signs each delivery with the webhook's secret: `X-MLflow-Signature:
v1,<base64 HMAC-SHA256(secret, "{delivery_id}.{timestamp}.{body}")>`, beside
`X-MLflow-Delivery-Id` and `X-MLflow-Timestamp` (unix seconds). A missing or
wrong signature, or a timestamp more than `MAX_SKEW` seconds from now, is
`Unsigned` (the route answers 401 and nothing changes). The body is checked
as the bytes received, before it is parsed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

MAX_SKEW = 300  # seconds a delivery's timestamp may be from now, either way
MAX_DELIVERY_ID = 200  # characters of a delivery id


class Unsigned(Exception):
    """A delivery that does not prove it comes from the webhook: the reason, for the 401's detail."""


def signature_of(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """The `X-MLflow-Signature` MLflow sends for this delivery."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify_delivery(secret: str, delivery_id: str | None, timestamp: str | None, signature: str | None, body: bytes, now: float) -> None:
    """Return if the delivery is signed with `secret` and timely; else `Unsigned`."""
    if not delivery_id or not timestamp or not signature:
        missing = [name for name, value in (("X-MLflow-Delivery-Id", delivery_id), ("X-MLflow-Timestamp", timestamp),
                                            ("X-MLflow-Signature", signature)) if not value]  # fmt: skip
        raise Unsigned(f"the delivery lacks {', '.join(missing)}")
    if len(delivery_id) > MAX_DELIVERY_ID or not delivery_id.isprintable():
        raise Unsigned("X-MLflow-Delivery-Id is not a delivery id")
    expected = signature_of(secret, delivery_id, timestamp, body)
    if not any(hmac.compare_digest(expected.encode(), given.encode()) for given in signature.split() if given.isascii()):
        raise Unsigned("X-MLflow-Signature does not match the body signed with the webhook's secret")
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise Unsigned("X-MLflow-Timestamp is not unix seconds")
    if abs(now - int(timestamp)) > MAX_SKEW:
        raise Unsigned(f"X-MLflow-Timestamp is {int(now - int(timestamp))} s from now, more than {MAX_SKEW} s")
