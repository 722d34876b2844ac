"""In-process rate limiting (sliding window per key). Scale-out swaps in a Redis-backed limiter."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after: int


class SlidingWindowLimiter:
    """Approximate sliding window over two fixed windows; bounded memory (LRU of keys)."""

    def __init__(self, limit: int, window_seconds: float = 60.0, max_keys: int = 100_000) -> None:
        self.limit = limit
        self.window = window_seconds
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[int, int, int]] = OrderedDict()

    def hit(self, key: str, now: float | None = None) -> RateDecision:
        if self.limit <= 0:
            return RateDecision(True, 0)
        now = time.monotonic() if now is None else now
        window_index = int(now // self.window)
        current_index, current, previous = self._buckets.pop(key, (window_index, 0, 0))
        if current_index != window_index:
            previous = current if current_index == window_index - 1 else 0
            current = 0
        elapsed = (now % self.window) / self.window
        estimated = previous * (1 - elapsed) + current
        if estimated + 1 > self.limit:
            self._buckets[key] = (window_index, current, previous)
            retry = math.ceil(self.window - (now % self.window))
            return RateDecision(False, max(1, retry))
        self._buckets[key] = (window_index, current + 1, previous)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return RateDecision(True, 0)
