"""Minimal Triton kernels that reproduce, without FLA, the interpreter failures gdn_verify.triton_cpu shims,
and that compute the same bits with and without each shim where the failure does not arise.

Import only after `triton_cpu.enable()` (or with TRITON_INTERPRET=1): `@triton.jit` decorates at import.
Each wrapper takes and returns CPU tensors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import triton
import triton.language as tl


@triton.jit
def _range_index_kernel(out, n):
    for i in range(n):
        tl.store(out + i, i.to(tl.int64) * 3)  # type: ignore[attr-defined]  # compiled Triton: a scalar int32 tensor


def range_index(out: torch.Tensor) -> torch.Tensor:
    """out[i] = 3 i through a dynamic range loop variable's `.to` (fails unshimmed: an int has no `.to`)."""
    _range_index_kernel[(1,)](out, out.numel())
    return out


@triton.jit
def _masked_copy_kernel(x, y, n, BD: tl.constexpr):
    o = tl.arange(0, BD)
    m = o < BD
    for t in tl.static_range(0, 2):
        m_t = (t < n) & m  # a scalar comparison splat to an int1 block
        tl.store(y + t * BD + o, tl.load(x + o, mask=m_t, other=0), mask=m)


def masked_copy(x: torch.Tensor, n: int) -> torch.Tensor:
    """[x, x if n > 1 else 0] for x of 8 elements, through a mask splat from a scalar comparison."""
    y = torch.zeros(2 * x.numel(), dtype=x.dtype)
    _masked_copy_kernel[(1,)](x, y, n, BD=x.numel())
    return y


@triton.jit
def _weighted_rows_kernel(x, y, n, s, BD: tl.constexpr):
    o = tl.arange(0, BD)
    acc = tl.zeros([BD], dtype=tl.float32)
    for i in range(n):  # the loop variable only in arithmetic: an int and a scalar tensor agree
        acc += tl.load(x + i * BD + o, mask=o < BD - i, other=1.0) * (i + 1) * s
    tl.store(y + o, tl.exp(acc) * 0.5 + s)


def weighted_rows(x: torch.Tensor, s: float) -> torch.Tensor:
    """sum_i (i + 1) s x[i, :] (masked tail = 1), then exp(.)/2 + s; rows [n, BD] of fp32."""
    y = torch.empty(x.shape[1], dtype=torch.float32)
    _weighted_rows_kernel[(1,)](x, y, x.shape[0], s, BD=x.shape[1])
    return y


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"])
@triton.jit
def _scaled_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 3.0 - 1.0, mask=o < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])
@triton.jit
def _scaled_one_config_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) * 3.0 - 1.0, mask=o < n)


def scaled(x: torch.Tensor, one_config: bool = False) -> torch.Tensor:
    """3 x - 1 through an autotuned kernel with two configs (or one: nothing to benchmark)."""
    y = torch.empty_like(x)
    kernel = _scaled_one_config_kernel if one_config else _scaled_kernel
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
    return y


@triton.jit
def _bf16_kernel(a, b, x, c, prod, lt, rounded, BN: tl.constexpr):
    o = tl.arange(0, BN)
    blk = o[:, None] * BN + o[None, :]
    tl.store(c + blk, tl.dot(tl.load(a + blk), tl.load(b + blk)))  # bf16 x bf16 -> fp32
    va, vb = tl.load(a + o), tl.load(b + o)  # bf16 rows: 1, 0, ... and 2.0
    tl.store(prod + o, va * vb * va)  # bf16 arithmetic
    tl.store(lt + o, (-vb < va).to(tl.int32))  # a bf16 comparison with a negative value
    tl.store(rounded + o, tl.load(x + o).to(tl.bfloat16))  # fp32 -> bf16


BF16_OPS_COMPILED = {"dot": 2.0, "product": [2.0] + [0.0] * 15, "less": [1] * 16, "rounded": 1.0078125}


def bf16_ops() -> dict:
    """Compiled Triton's answers are BF16_OPS_COMPILED: identity x 2.0 through tl.dot is 2.0; the bf16
    product a b a is 2.0 then 0; -2 < a holds; fp32 1 + 3 2^-9 rounds to nearest even, to 1 + 2^-7."""
    a = torch.eye(16, dtype=torch.bfloat16)
    b = torch.full((16, 16), 2.0, dtype=torch.bfloat16)
    x = torch.full((16,), 1.0 + 3 * 2.0**-9, dtype=torch.float32)
    c, prod = torch.empty(16, 16), torch.empty(16, dtype=torch.bfloat16)
    lt, rounded = torch.empty(16, dtype=torch.int32), torch.empty(16, dtype=torch.bfloat16)
    _bf16_kernel[(1,)](a, b, x, c, prod, lt, rounded, BN=16)
    return {"dot": float(c.max()) if bool((c == c.max()).all()) else c.tolist(), "product": prod.float().tolist(),
            "less": lt.tolist(), "rounded": float(rounded.float().max()) if bool((rounded == rounded.max()).all())
            else rounded.float().tolist()}


@triton.jit
def _dot_kernel(a, b, c, BN: tl.constexpr):
    o = tl.arange(0, BN)
    blk = o[:, None] * BN + o[None, :]
    tl.store(c + blk, tl.dot(tl.load(a + blk), tl.load(b + blk)))


def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """tl.dot of two [16, 16] blocks, fp32 result."""
    c = torch.empty(16, 16, dtype=torch.float32)
    _dot_kernel[(1,)](a, b, c, BN=16)
    return c


@triton.jit
def _scaled_row(x, s):
    return x * s


@triton.jit
def _row_sums_kernel(x, y, BN: tl.constexpr):
    o = tl.arange(0, BN)
    acc = tl.zeros([BN], dtype=tl.float32)
    for i in tl.static_range(4):  # nested @triton.jit calls: ours, and tl.sum's and tl.cumsum's in triton.language
        row = _scaled_row(tl.load(x + i * BN + o), i + 1.0)
        acc += tl.cumsum(row, 0) + tl.sum(row, 0)
    tl.store(y + o, acc)


def row_sums(x: torch.Tensor) -> torch.Tensor:
    """sum_i cumsum((i + 1) x[i]) + sum((i + 1) x[i]) over the 4 rows of x [4, BN] fp32."""
    y = torch.empty(x.shape[1], dtype=torch.float32)
    _row_sums_kernel[(1,)](x, y, BN=x.shape[1])
    return y


def lang_patches(launch) -> int:
    """How many times the interpreter patches a triton.language module while `launch()` runs (each patch ends
    in `_patch_lang_core`)."""
    from triton.runtime import interpreter

    core, count = interpreter._patch_lang_core, [0]

    def counted(lang, scope):
        count[0] += 1
        return core(lang, scope)

    interpreter._patch_lang_core = counted
    try:
        launch()
    finally:
        interpreter._patch_lang_core = core
    return count[0]


@triton.jit
def _int_products_kernel(x, y, BN: tl.constexpr):
    o = tl.arange(0, BN)
    v = tl.load(x + o)
    tl.store(y + o, v * v + v)  # two int32 ops, each followed by the interpreter's overflow check


def int_products(x: torch.Tensor) -> torch.Tensor:
    """x * x + x over int32 x [BN], wrapped to int32 as compiled Triton's (no overflow check without debug)."""
    y = torch.empty_like(x)
    _int_products_kernel[(1,)](x, y, BN=x.numel())
    return y


def overflow_checks(launch) -> int:
    """How many int overflow checks the interpreter computes while `launch()` runs (each ends in a
    device_assert naming the overflow)."""
    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    device_assert = semantic.device_assert
    count = [0]

    def counted(cond, msg, mask):
        count[0] += "overflow detected" in msg
        return device_assert(cond, msg, mask)

    semantic.device_assert = counted
    try:
        launch()
    finally:
        del semantic.device_assert
    return count[0]


@contextmanager
def _tuple_calls(method: str) -> Iterator[list[int]]:
    """Counts the calls of triton.language tuple's `method` (`__eq__`, `__init__`) made inside the block."""
    original, count = getattr(tl.core.tuple, method), [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    setattr(tl.core.tuple, method, counted)
    try:
        yield count
    finally:
        setattr(tl.core.tuple, method, original)


def fp32_block(shape: list[int]) -> tl.tensor:
    """An interpreter fp32 block of `shape` holding 0, 1, 2, ... in row-major order."""
    import numpy as np
    from triton.runtime import interpreter

    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return tl.tensor(interpreter.TensorHandle(data, tl.float32), tl.block_type(tl.float32, list(shape)))


def same_shape_compares() -> int:
    """How many triton.language tuple comparisons the interpreter's broadcast of two [4] fp32 blocks makes."""
    from triton.runtime import interpreter

    block = fp32_block([4])
    with _tuple_calls("__eq__") as count:
        lhs, rhs = interpreter.interpreter_semantic.broadcast_impl_value(block, block)
    assert lhs is block and rhs is block  # a same-shape broadcast returns its operands
    return count[0]


def shape_builds(shape: list[int]) -> int:
    """How many triton.language tuples the interpreter's front end builds for one more block type and one more
    tensor of `shape` (fp32) after a first of each: their shapes (and a block type's name and numel)."""
    fp32_block(shape)
    with _tuple_calls("__init__") as count:
        fp32_block(shape)
    return count[0]


def builtin_frames() -> tuple[int, bool]:
    """The Python frames between a kernel's call of a builtin, as the interpreter patches it into
    triton.language, and the builtin itself; and whether the builtin got the interpreter's semantic (the
    caller's own `_semantic=None` replaced, as a kernel's call never passes one)."""
    import sys
    from types import FrameType, SimpleNamespace

    from triton.runtime import interpreter

    seen: list[tuple[int, object]] = []

    @tl.core.builtin
    def probe(caller, _semantic=None):
        frame: FrameType | None = sys._getframe(1)
        frames = 0
        while frame is not None and frame is not caller:
            frames, frame = frames + 1, frame.f_back
        seen.append((frames, _semantic))

    module = SimpleNamespace(probe=probe)
    scope = interpreter._LangPatchScope()
    interpreter._patch_attr(module, "probe", probe, interpreter.interpreter_builder, scope)
    try:
        module.probe(sys._getframe(0), _semantic=None)
    finally:
        scope.restore()
    frames, semantic = seen[0]
    return frames, semantic is interpreter.interpreter_semantic


def broadcasts(pairs: list[tuple[list[int], list[int]]]) -> tuple[int, list]:
    """The interpreter's broadcast of fp32 blocks of each pair of shapes (arange data): how many
    triton.language tuple comparisons it made in all, and per pair the two results' shapes and data, or the
    first line of its refusal."""
    from triton.runtime import interpreter

    def result(lhs_shape: list[int], rhs_shape: list[int]) -> object:
        try:
            out = interpreter.interpreter_semantic.broadcast_impl_value(fp32_block(lhs_shape), fp32_block(rhs_shape))
        except ValueError as e:
            return f"ValueError: {str(e).splitlines()[0]}"
        return [[list(t.type.shape), t.handle.data.tolist()] for t in out]

    with _tuple_calls("__eq__") as count:
        results = [result(lhs, rhs) for lhs, rhs in pairs]
    return count[0], results
