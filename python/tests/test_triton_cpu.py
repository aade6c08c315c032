"""gdn_verify.triton_cpu: each shim (triton_shims, fla_shims) fixes the exact failure it names, and changes no
result where it is not needed.

Each check runs in a fresh interpreter (TRITON_INTERPRET is read when triton decorates a kernel, and the
shims are process-wide): first unshimmed, to show the failure, then with the shim patched in. FLA's own
shims are needed by FLA 0.4.2 only, so they run both here (FLA 0.6.0: not needed, the same bits) and in
.venv-fla042 (the failure and its fix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from conftest import REPO

pytest.importorskip("triton")


# Every script's error(f): None, or the first line of what f() raised, with its type.
ERROR_HELPER = """
def error(f):
    try:
        f()
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None
"""


def _run(code: str, interpret: bool = True, python: str = sys.executable) -> Any:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([python, "-c", ERROR_HELPER + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


TRITON_SHIMS = """
    import json, numpy as np, torch
    from triton import language as tl
    from triton.runtime import interpreter
    from gdn_verify import triton_probes as p, triton_shims

    def error(f):
        try:
            f()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return None

    x, rows = torch.arange(1.0, 9.0), torch.linspace(-1.0, 1.0, 24).reshape(3, 8)
    square = torch.linspace(-3.0, 2.0, 256).reshape(16, 16)
    four = torch.linspace(-2.0, 3.0, 32).reshape(4, 8)
    ints = torch.tensor([3, 65536, -7, 46341], dtype=torch.int32)  # 65536^2 and 46341^2 overflow int32
    # blocks of one rank broadcast both ways, one way, a dimension 1 against 1; of different ranks; refused
    pairs = [([4, 1], [1, 4]), ([2, 4], [1, 4]), ([2, 4], [2, 1]), ([1, 1], [1, 1]), ([4], [2, 4]), ([4], [2])]
    probes = {"autotune-one-config": lambda: p.scaled(torch.arange(6.0)),
              "range-var-tensor": lambda: p.range_index(torch.zeros(4, dtype=torch.int64)),
              "splat-keeps-dtype": lambda: p.masked_copy(x, 1),
              "bf16-values": p.bf16_ops,
              "patch-lang-once": lambda: p.row_sums(four),
              "overflow-checks-dropped": lambda: p.int_products(ints),
              "np-dtype-table-once": lambda: interpreter._get_np_dtype(tl.float32),
              "broadcast-same-shape": p.same_shape_compares,
              "block-shapes-once": lambda: p.shape_builds([4]),
              "builtins-called-direct": p.builtin_frames,
              "broadcast-int-shapes": lambda: p.broadcasts([([4, 1], [1, 4])])}
    kernels = lambda: torch.cat([p.int_products(ints), p.weighted_rows(rows, 0.375).view(torch.int32),
                                 p.row_sums(four).view(torch.int32), p.masked_copy(x, 2).view(torch.int32),
                                 p.dot(square, square.t().contiguous()).flatten().view(torch.int32)])
    scalars = [v for v in vars(tl.core).values() if type(v) is tl.dtype]  # every dtype triton.language defines,
    dtypes = scalars + [f(t) for t in scalars for f in (tl.pointer_type, lambda t: tl.block_type(t, [2]))] + \
        [tl.block_type(tl.pointer_type(tl.float32), [2])]  # its pointers, blocks, a block of pointers

    def np_dtypes():  # the numpy storage of each, or the interpreter's refusal
        return [error(lambda: interpreter._get_np_dtype(t)) or str(interpreter._get_np_dtype(t)) for t in dtypes]

    def shape_facts():  # what a block type and a tensor built twice of each shape hold, or Triton's refusal
        facts = []
        for shape in ([4], [16, 32], [1, 8], (2, 2), tl.core.tuple([8, 2]), [tl.constexpr(4)], [3], []):
            for elem in (tl.float32, tl.pointer_type(tl.bfloat16)):
                def build():
                    b = tl.block_type(elem, shape)
                    t = tl.tensor(interpreter.TensorHandle(np.zeros(1, dtype=np.float32), tl.float32), b)
                    return [b.name, b.numel, list(b.shape), b.element_ty is elem, b == tl.block_type(elem, shape),
                            [type(d).__name__ + str(d.value) for d in t.shape], t.numel.value, t.type is b,
                            t.dtype is elem]
                facts += [error(build) or build() for _ in range(2)]
        return facts
    unneeded = {"autotune-one-config": lambda: p.scaled(torch.arange(6.0), one_config=True),
                "range-var-tensor": lambda: p.weighted_rows(rows, 0.375),
                "splat-keeps-dtype": lambda: p.weighted_rows(rows, 0.375),
                "bf16-values": lambda: torch.cat([p.weighted_rows(rows, 0.375),
                                                  p.dot(square, square.t().contiguous()).flatten()]),
                "patch-lang-once": lambda: torch.cat([p.row_sums(four), p.weighted_rows(rows, 0.375),
                                                      p.dot(square, square.t().contiguous()).flatten()]),
                "overflow-checks-dropped": kernels, "np-dtype-table-once": kernels, "broadcast-same-shape": kernels,
                "block-shapes-once": kernels, "broadcast-int-shapes": kernels,
                # applied first (before splat-keeps-dtype, which masked_copy(x, 2)'s int32 mask needs here)
                "builtins-called-direct": lambda: torch.cat([p.int_products(ints), p.weighted_rows(rows, 0.375).view(
                    torch.int32), p.row_sums(four).view(torch.int32), p.dot(square, square.t().contiguous()).flatten()
                    .view(torch.int32)])}
    out = {"unshimmed": {n: error(f) for n, f in probes.items()}, "bf16_unshimmed": p.bf16_ops(),
           "patches_unshimmed": p.lang_patches(lambda: p.row_sums(four)),
           "checks_unshimmed": [p.overflow_checks(lambda: p.int_products(ints)), p.int_products(ints).tolist()],
           "table_unshimmed": triton_shims._builds_a_dict(interpreter._get_np_dtype),
           "compares_unshimmed": p.same_shape_compares(),
           "builds_unshimmed": [p.shape_builds([4]), p.shape_builds([16, 32])],
           "frames_unshimmed": p.builtin_frames(),
           "broadcasts_unshimmed": p.broadcasts(pairs),
           "needed": {s.name: s.needed() for s in triton_shims.TRITON_SHIMS}, "same_bits": {}}
    before_np_dtypes, before_shape_facts = np_dtypes(), shape_facts()
    for shim in triton_shims.TRITON_SHIMS:
        before = unneeded[shim.name]()
        shim.patch()
        out["same_bits"][shim.name] = bool(torch.equal(before, unneeded[shim.name]()) and before.abs().sum() > 0)
    scaled_rows = four * torch.arange(1.0, 5.0)[:, None]
    expected_row_sums = (torch.cumsum(scaled_rows, 1) + scaled_rows.sum(1, keepdim=True)).sum(0)
    scaled = p.scaled(torch.arange(6.0)).tolist()
    out["shimmed"] = {"autotune-one-config": [scaled, p._scaled_kernel.best_config.kwargs],
                      "range-var-tensor": p.range_index(torch.zeros(4, dtype=torch.int64)).tolist(),
                      "splat-keeps-dtype": [p.masked_copy(x, 1).tolist(), p.masked_copy(x, 2).tolist()],
                      "bf16-values": p.bf16_ops(),
                      "patch-lang-once": [p.lang_patches(lambda: p.row_sums(four)),
                                          bool(torch.allclose(p.row_sums(four), expected_row_sums,
                                                                             rtol=1e-6, atol=0))],
                      "overflow-checks-dropped": [p.overflow_checks(lambda: p.int_products(ints)),
                                                  p.int_products(ints).tolist()],
                      "np-dtype-table-once": [triton_shims._builds_a_dict(interpreter._get_np_dtype),
                                              np_dtypes() == before_np_dtypes, len(dtypes),
                                              sum("KeyError" in d for d in before_np_dtypes)],
                      "broadcast-same-shape": p.same_shape_compares(),
                      "block-shapes-once": [p.shape_builds([4]), p.shape_builds([16, 32]),
                                            shape_facts() == before_shape_facts, before_shape_facts[-8:]],
                      "builtins-called-direct": p.builtin_frames(),
                      "broadcast-int-shapes": p.broadcasts(pairs)}
    print(json.dumps(out))
"""


# x * x + x for x = 3, 65536, -7, 46341 in int32 arithmetic: wrapped modulo 2^32 to [-2^31, 2^31)
WRAPPED_PRODUCTS = [(x * x + x + 2**31) % 2**32 - 2**31 for x in (3, 65536, -7, 46341)]


@pytest.fixture(scope="module")
def triton_shims() -> dict:
    return _run(TRITON_SHIMS)


def test_each_triton_shim_is_needed_here_and_its_failure_is_exact(triton_shims):
    assert triton_shims["unshimmed"] == {
        "autotune-one-config": "RuntimeError: 0 active drivers ([]). There should only be one.",
        "range-var-tensor": "InterpreterError: AttributeError(\"'int' object has no attribute 'to'\")",
        "splat-keeps-dtype": "InterpreterError: ValueError('mask has unsupported dtype')",
        "bf16-values": None,  # no error: wrong values, below
        "patch-lang-once": None,  # no error: a cost, below
        "overflow-checks-dropped": None,  # no error although two products overflow: the checks are dropped
        "np-dtype-table-once": None,  # no error: a cost, below
        "broadcast-same-shape": None,  # no error: a cost, below
        "block-shapes-once": None,  # no error: a cost, below
        "builtins-called-direct": None,  # no error: a cost, below
        "broadcast-int-shapes": None,  # no error: a cost, below
    }
    # the launch patches triton.language once, then again on every nested call: _scaled_row (4), tl.cumsum and
    # tl.sum (4 each) and the scan's and reduction's own helpers inside them: 23 patches of a module
    assert triton_shims["patches_unshimmed"] == 23
    # x * x + x: the mul's and the add's overflow checks computed (and dropped: the values wrap, as compiled)
    assert triton_shims["checks_unshimmed"] == [2, WRAPPED_PRODUCTS]
    # the dtype -> numpy table is a dict built on every call; a same-shape broadcast compares each operand's shape
    # with the common one as triton.language tuples
    assert triton_shims["table_unshimmed"] is True and triton_shims["compares_unshimmed"] == 2
    # one more block type and tensor of a shape already built: each builds its shape's triton.language tuple anew
    assert triton_shims["builds_unshimmed"] == [2, 2]
    # a builtin called through the interpreter's patch: its lambda and the builtin's wrapper between kernel and
    # builtin, which gets the interpreter's semantic
    assert triton_shims["frames_unshimmed"] == [2, True]
    # each operand's shape compared with the common one as triton.language tuples: 2 per pair of one rank (5 of 6
    # pairs; [4] with [2] is refused first), the results as numpy broadcasts arange data
    compares, results = triton_shims["broadcasts_unshimmed"]
    assert compares == 2 * 5
    assert results[0] == [[[4, 4], [[i] * 4 for i in range(4)]], [[4, 4], [list(range(4))] * 4]]
    assert results[4] == [[[2, 4], [list(range(4))] * 2], [[2, 4], [[0, 1, 2, 3], [4, 5, 6, 7]]]]
    assert results[5] == "ValueError: Cannot make_shape_compatible: incompatible dimensions at index 0: 4 and 2"
    # bf16 computed on its uint16 bits: 0x3F80 * 0x4000 summed once for identity x 2.0, the product's
    # integers wrapped, -2.0 (0xC000) not below 1.0 (0x3F80), 1 + 3 2^-9 truncated to 1.0
    assert triton_shims["bf16_unshimmed"] == {"dot": 0x3F80 * 0x4000, "product": [0.0] * 16, "less": [0] * 16,
                                              "rounded": 1.0}
    assert triton_shims["needed"] == {n: True for n in triton_shims["unshimmed"]}


def test_each_triton_shim_fixes_its_failure_with_compiled_tritons_result(triton_shims):
    x = [float(i) for i in range(1, 9)]
    assert triton_shims["shimmed"] == {
        # of 6 elements, BLOCK 8 launches 1 program, the first config's BLOCK 4 two
        "autotune-one-config": [[3.0 * i - 1.0 for i in range(6)], {"BLOCK": 8}],
        "range-var-tensor": [0, 3, 6, 9],
        "splat-keeps-dtype": [x + [0.0] * 8, x + x],
        "bf16-values": {"dot": 2.0, "product": [2.0] + [0.0] * 15, "less": [1] * 16, "rounded": 1.0 + 2**-7},
        # the launch's patch of triton.language, then the first nested call's of triton.language.core and
        # triton.language (tl.cumsum's module sees both), each skipped after; the sums torch's to fp32 rounding
        "patch-lang-once": [3, True],
        # no check computed, the same int32 values as compiled Triton's (wrapped, no overflow check without debug)
        "overflow-checks-dropped": [0, WRAPPED_PRODUCTS],
        # no table built per call, the interpreter's answer for each of the 19 scalar dtypes triton.language
        # defines, their pointers and blocks and a block of pointers (void's twice refused: KeyError, as before)
        "np-dtype-table-once": [False, True, 3 * 19 + 1, 2],
        "broadcast-same-shape": 0,  # the operands returned at once, no tuple compared
        # no tuple built for a shape seen before; every block type and tensor of 8 shapes (two of them refused)
        # and 2 element types, each built twice, holds what Triton's constructors give (the refusals the same)
        "block-shapes-once": [0, 0, True, ["ValueError: Shape element 0 must be a power of 2"] * 4 +
                              ["TypeError: 0d block_type is forbidden"] * 4],
        "builtins-called-direct": [1, True],  # one closure between kernel and builtin, the same semantic
        # no tuple compared where the ranks agree (the pair of ranks 1 and 2 goes to the interpreter's broadcast:
        # its 2), every result and the refusal as before
        "broadcast-int-shapes": [2, triton_shims["broadcasts_unshimmed"][1]],
    }


def test_each_triton_shim_changes_no_bits_where_it_is_not_needed(triton_shims):
    assert triton_shims["same_bits"] == {n: True for n in triton_shims["unshimmed"]}


def test_enable_refuses_a_triton_imported_without_the_interpreter():
    out = _run("""
        import json, triton
        from gdn_verify import triton_cpu
        try:
            triton_cpu.enable()
            print(json.dumps("enabled"))
        except triton_cpu.TritonCpuError as e:
            print(json.dumps(str(e)))
    """, interpret=False)
    assert out.startswith("triton was imported before gdn_verify.triton_cpu.enable() without TRITON_INTERPRET=1")


FLA_CP_SHIMS = """
    import json, os, socket, torch, torch.distributed as dist
    from fla.ops.cp import chunk_delta_h, context
    from gdn_verify import triton_cpu

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    inp = torch.linspace(-2.0, 3.0, 6).reshape(2, 3)
    stacked, flat = torch.zeros(1, 2, 3), torch.zeros(2, 3)
    out = {"unshimmed": {"cp-device-cpu": error(lambda: chunk_delta_h._check_cp_device(torch.device("cpu"))),
                         "gloo-all-gather-view": error(lambda: dist.all_gather_into_tensor(stacked, inp))}}
    dist.all_gather_into_tensor(flat, inp)
    before = flat.clone()
    out["needed"] = triton_cpu.SHIMS["cp-device-cpu"].needed()
    for name in ("cp-device-cpu", "gloo-all-gather-view"):
        triton_cpu.SHIMS[name].patch()
    out["shimmed"] = {"cp-device-cpu": error(lambda: chunk_delta_h._check_cp_device(torch.device("cpu"))),
                      "cp-device-meta": error(lambda: context._check_cp_device(torch.device("meta"))),
                      "gloo-all-gather-view": error(lambda: dist.all_gather_into_tensor(stacked, inp))}
    flat.zero_()
    dist.all_gather_into_tensor(flat, inp)
    out["gathered"] = bool(torch.equal(stacked[0], inp))
    out["flat_same_bits"] = bool(torch.equal(flat, before) and before.abs().sum() > 0)
    dist.destroy_process_group()
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fla_cp_shims() -> dict:
    pytest.importorskip("fla.ops.cp")
    return _run(FLA_CP_SHIMS)


def test_each_fla_cp_shim_fixes_its_exact_failure(fla_cp_shims):
    assert fla_cp_shims["unshimmed"] == {
        "cp-device-cpu": "RuntimeError: CP affine chains require NVIDIA Ampere or newer (compute capability >= 8.0), "
                         "or Ascend.",
        "gloo-all-gather-view": "RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 "
                                "(expected (2, 3), got (1, 2, 3))",
    }
    assert fla_cp_shims["needed"] is True
    assert fla_cp_shims["shimmed"]["cp-device-cpu"] is None
    assert fla_cp_shims["shimmed"]["gloo-all-gather-view"] is None and fla_cp_shims["gathered"]


def test_fla_cp_shims_change_nothing_where_not_needed(fla_cp_shims):
    # a device other than the CPU still meets FLA's own check; a flat output gathers the same bits
    assert fla_cp_shims["shimmed"]["cp-device-meta"].startswith("RuntimeError: CP affine chains require NVIDIA")
    assert fla_cp_shims["flat_same_bits"]


FLA_SHIMS = """
    import json, torch
    import torch.nn.functional as F
    from gdn_verify import fla_shims, triton_cpu

    triton_cpu.enable()
    from fla import utils
    from fla.modules import FusedRMSNormGated

    x = torch.linspace(-2.0, 3.0, 24 * 32).reshape(24, 2, 16).sin()
    z, dy = x.flip(0).cos(), x.roll(5).tanh()

    def norm():  # FLA's gated RMSNorm forward and backward: an op under input_guard, its backward's program count
        layer = FusedRMSNormGated(16, eps=1e-6)
        xs, zs = x.clone().requires_grad_(), z.clone().requires_grad_()
        layer(xs, zs).backward(dy)
        return torch.cat([layer(x, z).flatten(), xs.grad.flatten(), zs.grad.flatten(), layer.weight.grad])

    def reference():  # the same in fp64 torch: x / rms(x) w silu(z)
        xs, zs, w = x.double().requires_grad_(), z.double().requires_grad_(), torch.ones(16, dtype=torch.float64)
        w.requires_grad_()
        y = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6) * w * F.silu(zs)
        y.backward(dy.double())
        return torch.cat([y.flatten(), xs.grad.flatten(), zs.grad.flatten(), w.grad]).detach()

    out = {"needed": {s.name: s.needed() for s in fla_shims.FLA_SHIMS},
           "unshimmed": {"fla-device-ctx-cpu": error(lambda: utils.custom_device_ctx(None)),
                         "fla-sm-count-no-driver": error(lambda: utils.get_multiprocessor_count(0)),
                         "norm": error(norm)},
           "cp-device-cpu needed": triton_cpu.SHIMS["cp-device-cpu"].needed()}
    before = None if out["unshimmed"]["norm"] else norm().detach()
    for shim in fla_shims.FLA_SHIMS:
        shim.patch()
    after = norm().detach()
    ref = reference()
    out["shimmed"] = {"fla-device-ctx-cpu": type(utils.custom_device_ctx(None)).__name__,
                      "fla-sm-count-no-driver": utils.get_multiprocessor_count(0),
                      "norm rel err": float((after.double() - ref).abs().max() / ref.abs().max())}
    out["same_bits"] = None if before is None else bool(torch.equal(before, after))
    print(json.dumps(out))
"""


def test_flas_own_shims_are_not_needed_by_fla_060_and_change_no_bits():
    pytest.importorskip("fla.ops.cp")
    out = _run(FLA_SHIMS)
    assert out["needed"] == {"fla-device-ctx-cpu": False, "fla-sm-count-no-driver": False}
    assert out["unshimmed"] == {"fla-device-ctx-cpu": None, "fla-sm-count-no-driver": None, "norm": None}
    assert out["same_bits"] is True and out["shimmed"]["norm rel err"] < 1e-6
    assert out["shimmed"]["fla-device-ctx-cpu"] == "nullcontext" and out["shimmed"]["fla-sm-count-no-driver"] == 1


def test_each_fla_shim_fixes_its_exact_failure_on_fla_042(fla042_python):
    out = _run(FLA_SHIMS, python=str(fla042_python))
    assert out["needed"] == {"fla-device-ctx-cpu": True, "fla-sm-count-no-driver": True}
    assert out["unshimmed"] == {
        "fla-device-ctx-cpu": "AttributeError: module 'torch.cpu' has no attribute 'device'",
        "fla-sm-count-no-driver": "RuntimeError: 0 active drivers ([]). There should only be one.",
        "norm": "AttributeError: module 'torch.cpu' has no attribute 'device'",  # the op's input_guard, first
    }
    # no device context entered for a CPU tensor; FLA's own fallback program count; the op then computes what
    # the fp64 formula does, to fp32 rounding
    assert out["shimmed"]["fla-device-ctx-cpu"] == "nullcontext" and out["shimmed"]["fla-sm-count-no-driver"] == 1
    assert out["shimmed"]["norm rel err"] < 1e-6
    assert out["cp-device-cpu needed"] is False  # FLA 0.4.2 has no CP device check
