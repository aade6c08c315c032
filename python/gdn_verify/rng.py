"""The counter-based PRNG of core/rng.*, bit for bit (docs/DESIGN.md §4 "Inputs").

Only integer operations and IEEE +, -, *, /, sqrt are used, as in C++, so every value is a pure function
of (seed, stream, index) on any machine; Python floats are IEEE doubles without fused multiply-adds,
matching the C++ build's -ffp-contract=off.
"""

from __future__ import annotations

import math

import torch

_MASK = (1 << 64) - 1
_TWO_POW_M53 = 2.0**-53


def hash64(seed: int, stream: int, index: int) -> int:
    """64-bit mix of the three counters (SplitMix64 finaliser over a Weyl combination), as core/rng.cpp."""
    x = ((seed * 0x9E3779B97F4A7C15) & _MASK) ^ (((stream + 0x632BE59BD9B4E019) & _MASK) * 0xBF58476D1CE4E5B9 & _MASK)
    x = (x + index * 0x94D049BB133111EB) & _MASK
    for _ in range(2):
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & _MASK
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


def stream_of(name: str) -> int:
    """Stable stream id of a name (FNV-1a over its UTF-8 bytes), so each tensor is seeded by its name."""
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & _MASK
    return h


def det_log(x: float) -> float:
    """Natural logarithm from IEEE arithmetic only, operation for operation as core/rng.cpp `det_log`."""
    m, e = math.frexp(x)
    if m < 0.70710678118654752:
        m *= 2.0
        e -= 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    series = 0.0
    for k in range(23, 0, -2):
        series = series * s2 + 1.0 / k
    ln2_hi, ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
    return e * ln2_hi + (2.0 * s * series + e * ln2_lo)


class Rng:
    """Counter-based draws: element i of a stream is a pure function of (seed, stream, i) (core/rng.hpp)."""

    def __init__(self, seed: int, stream: str | int) -> None:
        self.seed = seed & _MASK
        self.stream = stream_of(stream) if isinstance(stream, str) else stream

    def uniform(self, i: int) -> float:
        """[0, 1) from 53 random bits."""
        return float(hash64(self.seed, self.stream, i) >> 11) * _TWO_POW_M53

    def normal(self, i: int) -> float:
        """N(0, 1) by Marsaglia's polar method, attempt a on the counter pair folded into one index."""
        a = 0
        while True:
            base = (hash64(self.seed ^ 0x5BD1E995, self.stream, i) + a * 2) & _MASK
            u = 2.0 * float(hash64(self.seed, self.stream, base) >> 11) * _TWO_POW_M53 - 1.0
            v = 2.0 * float(hash64(self.seed, self.stream, (base + 1) & _MASK) >> 11) * _TWO_POW_M53 - 1.0
            r2 = u * u + v * v
            if 0.0 < r2 < 1.0:
                return u * math.sqrt(-2.0 * det_log(r2) / r2)
            a += 1


def seeded_normal(seed: int, name: str, shape: tuple[int, ...], std: float = 1.0) -> torch.Tensor:
    """Flat element i = std * N(0, 1) from Rng(seed, name) counter i (`ref::seeded_normal`), F64."""
    rng = Rng(seed, name)
    return torch.tensor([std * rng.normal(i) for i in range(math.prod(shape))], dtype=torch.float64).reshape(shape)


def seeded_uniform(seed: int, name: str, shape: tuple[int, ...], f) -> torch.Tensor:
    """Flat element i = f(Rng(seed, name).uniform(i)), F64."""
    rng = Rng(seed, name)
    return torch.tensor([f(rng.uniform(i)) for i in range(math.prod(shape))], dtype=torch.float64).reshape(shape)
