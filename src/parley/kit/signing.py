"""The one signature of Parley's outgoing webhooks (notification channels and call events).

``X-Parley-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``: the receiver recomputes
the HMAC over the exact bytes it received with the shared secret, compares in constant time, and
refuses a timestamp too far from its own clock (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Parley-Signature"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`` (receivers recompute and compare)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(
    secret: str, header: str, body: bytes, *, tolerance: float = 300.0, now: float | None = None
) -> bool:
    """True when ``header`` is a valid signature of ``body`` made within ``tolerance`` seconds of ``now``."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body)
    return hmac.compare_digest(expected, f"t={timestamp},v1={parts.get('v1', '')}")
