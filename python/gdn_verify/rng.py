"""The counter-based PRNG of core/rng.*, bit for bit (docs/DESIGN.md §4 "Inputs").

Only integer operations and IEEE +, -, *, /, sqrt are used, as in C++, so every value is a pure function
of (seed, stream, index) on any machine. Draws are made a whole tensor at a time in numpy: its uint64
arithmetic wraps as C++'s does, and each float64 element-wise op is one IEEE rounding, never fused, matching
the C++ build's -ffp-contract=off.
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
import torch

_MASK = (1 << 64) - 1
_TWO_POW_M53 = 2.0**-53


def hashes(seed: int, stream: int, index: np.ndarray) -> np.ndarray:
    """64-bit mix of the three counters (SplitMix64 finaliser over a Weyl combination), as core/rng.cpp, for
    each element of `index` (uint64): numpy's uint64 arithmetic wraps modulo 2^64 as C++'s does."""
    u64 = np.uint64
    weyl = ((seed * 0x9E3779B97F4A7C15) & _MASK) ^ ((stream + 0x632BE59BD9B4E019) & _MASK) * 0xBF58476D1CE4E5B9 & _MASK
    x = u64(weyl) + index.astype(u64) * u64(0x94D049BB133111EB)
    for _ in range(2):
        x ^= x >> u64(30)
        x *= u64(0xBF58476D1CE4E5B9)
        x ^= x >> u64(27)
        x *= u64(0x94D049BB133111EB)
        x ^= x >> u64(31)
    return x


def stream_of(name: str) -> int:
    """Stable stream id of a name (FNV-1a over its UTF-8 bytes), so each tensor is seeded by its name."""
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & _MASK
    return h


@overload
def det_log(x: float) -> float: ...
@overload
def det_log(x: np.ndarray) -> np.ndarray: ...
def det_log(x):
    """Natural logarithm from IEEE arithmetic only, operation for operation as core/rng.cpp `det_log`, of a float
    or element-wise of a float64 array."""
    m, e = np.frexp(x)
    low = m < 0.70710678118654752
    m, e = np.where(low, m * 2.0, m), np.where(low, e - 1, e)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    series = np.zeros_like(s)
    for k in range(23, 0, -2):
        series = series * s2 + 1.0 / k
    ln2_hi, ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
    out = e * ln2_hi + (2.0 * s * series + e * ln2_lo)
    return out if isinstance(x, np.ndarray) else float(out)


def _unit(h: np.ndarray) -> np.ndarray:
    """[0, 1) from the top 53 bits (exact in a double)."""
    return (h >> np.uint64(11)).astype(np.float64) * _TWO_POW_M53


class Rng:
    """Counter-based draws: element i of a stream is a pure function of (seed, stream, i) (core/rng.hpp)."""

    def __init__(self, seed: int, stream: str | int) -> None:
        self.seed = seed & _MASK
        self.stream = stream_of(stream) if isinstance(stream, str) else stream

    def uniforms(self, n: int) -> np.ndarray:
        """Draws 0 .. n-1 in [0, 1), from 53 random bits each."""
        return _unit(hashes(self.seed, self.stream, np.arange(n, dtype=np.uint64)))

    def normals(self, n: int) -> np.ndarray:
        """Draws 0 .. n-1 of N(0, 1) by Marsaglia's polar method: attempt a of draw i on the counter pair
        folded into one index, every draw still pending taking its next attempt together."""
        out = np.empty(n)
        pending = np.arange(n, dtype=np.uint64)
        first = hashes(self.seed ^ 0x5BD1E995, self.stream, pending)
        a = 0
        while pending.size:
            base = first + np.uint64(a * 2)
            u = 2.0 * _unit(hashes(self.seed, self.stream, base)) - 1.0
            v = 2.0 * _unit(hashes(self.seed, self.stream, base + np.uint64(1))) - 1.0
            r2 = u * u + v * v
            ok = (0.0 < r2) & (r2 < 1.0)
            out[pending[ok]] = u[ok] * np.sqrt(-2.0 * det_log(r2[ok]) / r2[ok])
            pending, first, a = pending[~ok], first[~ok], a + 1
        return out


def seeded_normal(seed: int, name: str, shape: tuple[int, ...], std: float = 1.0) -> torch.Tensor:
    """Flat element i = std * N(0, 1) from Rng(seed, name) counter i (`ref::seeded_normal`), F64."""
    return torch.from_numpy(std * Rng(seed, name).normals(math.prod(shape))).reshape(shape)


def seeded_uniform(seed: int, name: str, shape: tuple[int, ...], f) -> torch.Tensor:
    """Flat element i = f(draw i of Rng(seed, name).uniforms), F64."""
    draws = Rng(seed, name).uniforms(math.prod(shape)).tolist()
    return torch.tensor([f(u) for u in draws], dtype=torch.float64).reshape(shape)
