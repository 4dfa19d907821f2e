"""Exponential back-off with jitter, for retries of calls and of pods."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    """Delays of ``initial``, then doubling up to ``maximum``, each scaled by a random factor
    in [1 - jitter, 1], so that many clients failing together do not retry together."""

    initial: float = 0.5
    maximum: float = 30.0
    jitter: float = 0.2
    attempts: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def next(self) -> float:
        delay = min(self.maximum, self.initial * 2.0 ** min(self.attempts, 30))
        self.attempts += 1
        return delay * (1.0 - self.jitter * self._random.random())

    def reset(self) -> None:
        self.attempts = 0
