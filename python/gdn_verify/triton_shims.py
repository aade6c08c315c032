"""What a shim is, and the shims of Triton's interpreter that gdn_verify.triton_cpu applies (docs/triton_cpu.md).

A `Shim` names the exact failure it fixes, a probe that reproduces it on this installation (`needed`)
and a patch that returns its undo; `set_attr`, `undo_all` and `fails_with` build them. None touches the
math: each changes what the interpreter does. FLA's shims are gdn_verify.fla_shims.

| shim | failure it fixes (exact message) | where |
|---|---|---|
| `autotune-one-config` | `RuntimeError: 0 active drivers ([]). There should only be one.` | any `@triton.autotune` with several configs: benchmarking needs a driver; the config with the fewest programs is kept (the first of those tied) |
| `range-var-tensor` | `AttributeError("'int' object has no attribute 'to'")` | a `range`/`tl.range` loop variable is a Python int in the interpreter, a scalar tensor when compiled (FLA `chunk_delta_h.py`: `i_t.to(tl.int64)`) |
| `splat-keeps-dtype` | `ValueError('mask has unsupported dtype')` | the interpreter's splat takes the handle's dtype, int32 after a comparison, not the int1 it splats to (FLA `causal_conv1d` backward with initial state) |
| `patch-lang-once` | none, a cost: `triton.language` re-patched on every nested `@triton.jit` call of a launch (a quarter of FLA's layer time) | any kernel calling `tl.sum`, `tl.cumsum` or its own `@triton.jit` helpers |
| `overflow-checks-dropped` | none, a cost: every int32 add/sub/mul's overflow check computed, then dropped (no `debug`) | any kernel's index arithmetic |
| `np-dtype-table-once` | none, a cost: the dtype -> numpy table rebuilt on every op | every load, store, splat, cast |
| `broadcast-same-shape` | none, a cost: two shapes compared as `tl.tuple`s on every same-shape binary op | every elementwise op on blocks |
| `block-shapes-once` | none, a cost: a block type's and a tensor's shape tuples, numel and name derived anew on every op (a fifth of FLA's layer time) | every op |
| `builtins-called-direct` | none, a cost: a lambda, a keyword dict and the builtin's wrapper between a kernel and each builtin | every builtin call |
| `broadcast-int-shapes` | none, a cost: two shapes compared with the common one as `tl.tuple`s on every broadcasting binary op | every elementwise op on blocks of different shapes |
| `bf16-values` | none, wrong values: bf16 `tl.dot`, arithmetic, comparisons and reductions run on the uint16 storage (identity x 2.0 gives 266338304.0), fp32 -> bf16 truncates (1 + 3 2^-9 gives 1.0, not 1 + 2^-7) | the interpreter keeps bf16 as uint16 bits (FLA `chunk_gated_delta_rule` in bf16: rel. error 5e10) |

"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Shim:
    """One change to a library's runtime, the exact error it fixes, how to detect the need, how to apply."""

    name: str
    error: str  # the exact message of the failure without the shim
    needed: Callable[[], bool]  # True when this installation reproduces the failure
    patch: Callable[[], Callable[[], None]]  # applies the shim, returns a function that undoes it


def set_attr(owner: object, attr: str, value: object) -> Callable[[], None]:
    """owner.attr = value; returns the undo."""
    old = getattr(owner, attr)
    setattr(owner, attr, value)
    return lambda: setattr(owner, attr, old)


def undo_all(undos: list[Callable[[], None]]) -> None:
    for undo in undos:
        undo()


def fails_with(probe: Callable[[], object], message: str) -> bool:
    """True when probe() raises an exception whose text contains message; other exceptions propagate."""
    try:
        probe()
    except Exception as e:  # noqa: BLE001 -- the probe's failure is the finding, matched by its message
        if message in str(e):
            return True
        raise
    return False


# (1) The autotuner benchmarks each config on the active driver; the interpreter has none (and its CPU
# time would say nothing about a GPU's). One config is kept (after the kernel's own pruning): the one whose
# launch has the fewest programs, the first of those tied. The interpreter's time is per program and per op,
# nearly never per element, so that is the config it runs fastest: FLA's causal_conv1d takes BD = 64 or 128
# where its first config has 16. A config can change a kernel's bits where its block sets the order of a
# reduction (a tl.dot loop over BK); docs/triton_cpu.md says what changes on FLA's kernels, whose gate images
# are byte-identical under both rules.
AUTOTUNE_ERROR = "0 active drivers"


def _autotune_needed() -> bool:
    from triton.runtime import driver

    return fails_with(lambda: driver.active.get_benchmarker(), AUTOTUNE_ERROR)


def _programs(tuner, kwargs: dict, config) -> int:
    """The programs of the launch `tuner.run` makes with `config`: its grid's product."""
    grid = kwargs["grid"]
    if callable(grid):
        grid = grid({**tuner.nargs, **kwargs, **config.all_kwargs()})
    return math.prod(grid)


def _autotune_patch() -> Callable[[], None]:
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs

    def fewest_programs(self, kwargs):
        return [min(prune(self, kwargs), key=lambda config: _programs(self, kwargs, config))]

    return set_attr(Autotuner, "prune_configs", fewest_programs)


# (2) Compiled Triton's loop variable of `for i in range(...)` / `tl.range(...)` is a scalar tensor; the
# interpreter runs the loop with Python's range, so `i.to(...)` fails. The shim rebinds the variable to a
# tensor at the top of the body (`i = i`, which the interpreter's own Assign rewrite turns into
# to_tensor(i): int32, as compiled Triton types it for int32 bounds; for int64 bounds it would be int64,
# the same values while they fit in int32). `tl.static_range` stays an int.
RANGE_ERROR = "'int' object has no attribute 'to'"


def _range_needed() -> bool:
    import torch

    from gdn_verify import triton_probes

    return fails_with(lambda: triton_probes.range_index(torch.zeros(4, dtype=torch.int64)), RANGE_ERROR)


def _range_patch() -> Callable[[], None]:
    from triton.runtime import interpreter

    class RangeVarTensor(interpreter.ASTTransformer):
        def visit_For(self, node: ast.For) -> ast.For:
            node = self.generic_visit(node)
            call = node.iter.func if isinstance(node.iter, ast.Call) else None
            is_range = (isinstance(call, ast.Name) and call.id == "range") or \
                       (isinstance(call, ast.Attribute) and call.attr == "range")
            if is_range and isinstance(node.target, ast.Name):
                i = node.target.id
                rebind = ast.Assign(targets=[ast.Name(id=i, ctx=ast.Store())], value=ast.Name(id=i, ctx=ast.Load()))
                node.body.insert(0, ast.copy_location(self.visit_Assign(rebind), node))
            return node

    undo = set_attr(interpreter.FunctionRewriter, "ast_transformer", RangeVarTensor())
    interpreter.InterpretedFunction.rewritten_fn.clear()  # kernels rewritten before now are rewritten again

    def undo_and_forget() -> None:
        undo()
        interpreter.InterpretedFunction.rewritten_fn.clear()

    return undo_and_forget


# (3) The interpreter's comparisons return bool data under the operand's dtype (int32); its splat then
# builds the block with that dtype instead of the int1 it is asked for, and tl.load refuses the mask.
# Compiled Triton's splat has the result type's element type; the shim builds the block with it.
SPLAT_ERROR = "mask has unsupported dtype"


def _splat_needed() -> bool:
    import torch

    from gdn_verify import triton_probes

    return fails_with(lambda: triton_probes.masked_copy(torch.arange(8.0), 1), SPLAT_ERROR)


def _splat_patch() -> Callable[[], None]:
    import numpy as np
    from triton import language as tl
    from triton.runtime import interpreter

    def create_splat(self, ret_ty, arg):
        value = arg.data[0] if isinstance(arg.dtype, tl.block_type) else arg.data
        return interpreter.TensorHandle(np.full(ret_ty.shape, value, dtype=interpreter._get_np_dtype(ret_ty.scalar)),
                                        ret_ty.scalar)

    return set_attr(interpreter.InterpreterBuilder, "create_splat", create_splat)


# (4) The interpreter keeps bf16 as its uint16 bits, and several of its paths treat those bits as numbers:
# `tl.dot` (create_dot converts only fp8), bf16 arithmetic and comparisons (binary_op, unary_op) and the
# tl.sum / tl.max / tl.min reductions compute on the integers, and an fp32 -> bf16 cast truncates where compiled
# Triton (fptrunc) rounds to nearest even.
# No error, wrong values. The shim computes bf16 operands on their values, widened exactly to fp32, and
# rounds bf16 results to nearest even (fp32 has 24 >= 2 * 8 + 2 bits, so the one op in fp32 then the
# rounding to bf16 is the correctly rounded bf16 op, as on a GPU).
BF16_WRONG = "bf16 computed on its uint16 storage"


def _bf16_needed() -> bool:
    from gdn_verify import triton_probes

    return triton_probes.bf16_ops() != triton_probes.BF16_OPS_COMPILED


def _bf16_patch() -> Callable[[], None]:
    import numpy as np
    import torch
    from triton import language as tl
    from triton.runtime import interpreter

    B = interpreter.InterpreterBuilder
    dot, binary, unary, cast, fp_to_fp = B.create_dot, B.binary_op, B.unary_op, B.cast_impl, B.create_fp_to_fp

    def is_bf16(x) -> bool:
        return x.dtype.scalar == tl.bfloat16

    def value(x):  # a bf16 handle as fp32 values (exact), any other as it is
        if not is_bf16(x):
            return x
        data = (np.asarray(x.data).astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def rounded(data) -> np.ndarray:  # float values -> bf16 bits, round to nearest even (torch's rounding)
        f32 = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
        return f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

    def as_bf16(out):
        if out.data.dtype == np.bool_ or not np.issubdtype(out.data.dtype, np.floating):
            return out
        return interpreter.TensorHandle(rounded(out.data), tl.bfloat16)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return dot(self, value(a), value(b), d, input_precision, max_num_imprecise_acc)

    def binary_op(self, lhs, rhs, op):
        if not (is_bf16(lhs) or is_bf16(rhs)):
            return binary(self, lhs, rhs, op)
        out = binary(self, value(lhs), value(rhs), op)
        if out.data.dtype == np.bool_:  # a comparison: int1, as compiled Triton types it
            return interpreter.TensorHandle(out.data, tl.int1)
        return as_bf16(out) if is_bf16(lhs) else interpreter.TensorHandle(out.data, lhs.dtype.scalar)

    def unary_op(self, arg, op):
        return as_bf16(unary(self, value(arg), op)) if is_bf16(arg) else unary(self, arg, op)

    def cast_impl(self, src, dst_type):
        if dst_type.scalar == tl.bfloat16 and src.dtype.scalar != tl.bfloat16:
            return interpreter.TensorHandle(rounded(np.asarray(src.data, dtype=np.float64)), tl.bfloat16)
        return cast(self, value(src), dst_type) if is_bf16(src) else cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        default = rounding_mode in (None, interpreter._ir.ROUNDING_MODE.RTNE)
        if default and tl.bfloat16 in (src.dtype.scalar, dst_type.scalar) and not dst_type.scalar.is_fp8():
            return cast_impl(self, src, dst_type)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    R = interpreter.ReduceOps
    reduce_sum, reduce_min_max = R.sum, R.min_max

    def as_values(x):  # a bf16 tl.tensor as an fp32 one (exact)
        return tl.core.tensor(value(x.handle), x.type.with_element_ty(tl.float32)) if is_bf16(x.handle) else x

    def as_bf16_tensor(x):
        return tl.core.tensor(as_bf16(x.handle), x.type.with_element_ty(tl.bfloat16))

    def sum_values(self, input):
        return as_bf16_tensor(reduce_sum(self, as_values(input))) if is_bf16(input.handle) else \
            reduce_sum(self, input)

    def min_max_values(self, input, val_reduce_op, idx_reduce_op=None):
        val = input[0] if isinstance(input, tuple) else input
        if not is_bf16(val.handle):
            return reduce_min_max(self, input, val_reduce_op, idx_reduce_op)
        out = reduce_min_max(self, as_values(val), val_reduce_op, idx_reduce_op)
        if val_reduce_op is None:
            return out
        return (as_bf16_tensor(out[0]), out[1]) if isinstance(out, tuple) else as_bf16_tensor(out)

    undos = [set_attr(B, name, f) for name, f in (("create_dot", create_dot), ("binary_op", binary_op),
                                               ("unary_op", unary_op), ("cast_impl", cast_impl),
                                               ("create_fp_to_fp", create_fp_to_fp))]
    undos += [set_attr(R, "sum", sum_values), set_attr(R, "min_max", min_max_values)]
    # the casts are bound to cast_impl as lambdas; rebinding cast_impl reaches them
    return lambda: undo_all(undos)


# (5) The interpreter patches triton.language (its builtins, the tensor class, the reduce and scan ops) when a
# launch starts and again on every nested @triton.jit call inside it (tl.sum, tl.cumsum, FLA's helpers): about
# 8,800 patches in one forward and backward of FLA's layer, a quarter of its time. No error, a cost. Within one
# launch a second patch of a module already patched in that launch finds its builtins replaced and rebinds
# equivalent closures: the shim skips it. The launch's first patch of each module, and the restore at its end,
# stay the interpreter's own, so what each kernel computes with is unchanged.
PATCH_COST = "triton.language re-patched on every nested @triton.jit call of a launch"
MODULES_PER_LAUNCH = 2  # the probe kernel sees triton.language; tl.sum and tl.cumsum see triton.language.core


def _patch_once_needed() -> bool:
    import torch

    from gdn_verify import triton_probes

    return triton_probes.lang_patches(lambda: triton_probes.row_sums(torch.ones(4, 8))) > MODULES_PER_LAUNCH


def _patch_once_patch() -> Callable[[], None]:
    from triton import language as tl
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    launches: list[set[int]] = []  # the modules patched in the open launch (at most one is open)

    class Launch:
        """The launch's own patch scope; its restore closes the launch."""

        def __init__(self, scope) -> None:
            self.scope = scope

        def restore(self) -> None:
            launches.pop()
            self.scope.restore()

    class Patched:
        def restore(self) -> None:  # a nested call's scope: the interpreter never restores it
            pass

    def patch_once(fn):  # the interpreter's own test of a global (a module that is tl or tl.core), by identity
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if launches and langs <= launches[-1]:
            return Patched()
        scope = patch_lang(fn)
        if launches:
            launches[-1] |= langs
            return scope
        launches.append(langs)
        return Launch(scope)

    return set_attr(interpreter, "_patch_lang", patch_once)


# (6) Every int32 add, sub and mul of a kernel (index arithmetic: offsets, masks' bounds) is followed by an
# overflow check: both operands cast to int64, the operation again, two comparisons, an and, and a
# device_assert, which the interpreter drops unless its options have `debug` (they do not: InterpreterOptions
# has debug False and nothing sets it). No error, a cost: about a tenth of FLA's layer time (its kernels'
# offsets and masks are int32). The shim skips the check exactly when the assert it feeds would be dropped;
# the operation itself, its int32 result (wrapped as before) and every other path are the interpreter's own.
OVERFLOW_COST = "int32 overflow checks computed on every int add/sub/mul, then dropped with debug off"


def _overflow_checks_needed() -> bool:
    import torch
    from triton.runtime import interpreter

    from gdn_verify import triton_probes

    checks = triton_probes.overflow_checks(lambda: triton_probes.int_products(torch.arange(4, dtype=torch.int32)))
    return checks > 0 and not interpreter.interpreter_builder.options.debug


def _overflow_checks_patch() -> Callable[[], None]:
    from types import MethodType

    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    check = type(semantic).binary_op_sanitize_overflow_impl

    def unless_dropped(self, lhs, rhs, binary_op):
        # device_assert returns before looking at the condition unless options.debug: the same test here
        return check(self, lhs, rhs, binary_op) if self.builder.options.debug else None

    semantic.binary_op_sanitize_overflow_impl = MethodType(unless_dropped, semantic)  # this instance only
    return lambda: delattr(semantic, "binary_op_sanitize_overflow_impl")


# (7) The interpreter maps a Triton dtype to its numpy storage dtype on every op (each load, store, splat,
# cast, full): a function that builds its 18-entry table anew on each call (7% of a profile of FLA's layer). No
# error, a cost. The shim asks that function once for each scalar dtype triton.language defines and looks
# the answers up after; any other dtype (a pointer, a block of pointers, one it has not seen) still goes to
# the interpreter's function, so every answer is the one it gives.
NP_DTYPE_COST = "the dtype -> numpy table rebuilt on every interpreter op"


def _np_dtype_needed() -> bool:
    from triton.runtime import interpreter

    return _builds_a_dict(interpreter._get_np_dtype)


def _builds_a_dict(fn: Callable) -> bool:
    """Whether fn builds a dict on each call: a BUILD_MAP / BUILD_CONST_KEY_MAP in its own bytecode."""
    import dis

    return any(i.opname in ("BUILD_MAP", "BUILD_CONST_KEY_MAP") for i in dis.get_instructions(fn))


def _np_dtype_patch() -> Callable[[], None]:
    from triton import language as tl
    from triton.runtime import interpreter

    per_call = interpreter._get_np_dtype
    table = {}
    for v in vars(tl.core).values():
        if type(v) is tl.dtype:  # the scalar dtypes (pointers, blocks and tuples are other classes)
            try:
                table[v] = per_call(v)
            except KeyError:  # a dtype the interpreter does not store (void): left to it
                pass

    def np_dtype(tt_dtype):
        elem = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        found = table.get(elem) if type(elem) is tl.dtype else None
        return per_call(tt_dtype) if found is None else found

    return set_attr(interpreter, "_get_np_dtype", np_dtype)


# (8) Every binary op broadcasts its operands (semantic.broadcast_impl_value); for two blocks of one shape
# the result is the operands unchanged, reached after building the common shape and comparing each operand's
# shape with it as triton.language tuples (two tuple comparisons per op, 5% of a profile of FLA's layer). No error,
# a cost. The shim returns the operands at once when both are blocks of the same shape (the same ints); any
# other pair goes through the interpreter's broadcast.
BROADCAST_COST = "shapes compared as triton.language tuples on every same-shape binary op"


def _same_shape_needed() -> bool:
    from gdn_verify import triton_probes

    return triton_probes.same_shape_compares() > 0


def _same_shape_patch() -> Callable[[], None]:
    from types import MethodType

    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    broadcast = type(semantic).broadcast_impl_value

    def same_shape_first(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if lhs_ty.is_block() and rhs_ty.is_block() and tuple(lhs_ty.shape) == tuple(rhs_ty.shape):
            return lhs, rhs
        return broadcast(self, lhs, rhs)

    semantic.broadcast_impl_value = MethodType(same_shape_first, semantic)  # this instance only
    return lambda: delattr(semantic, "broadcast_impl_value")


# (9) Every op builds a block type and a tensor; each construction derives the same values from its shape's ints
# anew: a block type a triton.language tuple of them (with a tuple type of one constexpr type each), its numel
# (every dimension checked a power of two) and its name; a tensor a tuple of one constexpr per dimension and a
# constexpr numel. No error, a cost: about a fifth of FLA's layer time. The shim derives them once per shape
# (all plain ints) and shares them between constructions: the interpreter never changes a shape's tuple or a
# constexpr after building it (neither defines item assignment; `tl.tuple._setitem` is the compiler's, for a
# kernel's own tuples). The element type, handle and type stay each construction's own; any other shape (a
# constexpr in it, an empty or invalid one) goes through Triton's constructor, which raises as before. Applied
# only where the two constructors set exactly the attributes the shim sets (this Triton's).
SHAPES_COST = "a block type's and a tensor's shape tuples, numel and name derived anew on every op"
BLOCK_ATTRS, TENSOR_ATTRS = {"element_ty", "shape", "numel", "name"}, {"handle", "shape", "numel", "type", "dtype"}


def _shapes_needed() -> bool:
    from gdn_verify import triton_probes

    tensor = triton_probes.fp32_block([4])
    same_attrs = set(vars(tensor.type)) == BLOCK_ATTRS and set(vars(tensor)) == TENSOR_ATTRS
    return same_attrs and triton_probes.shape_builds([4]) > 0


def _shapes_patch() -> Callable[[], None]:
    from triton import language as tl

    block_init, tensor_init, lang_tuple = tl.core.block_type.__init__, tl.core.tensor.__init__, tl.core.tuple
    blocks: dict[tuple[int, ...], tuple] = {}  # shape -> a block type's shape, numel and the shape's text
    tensors: dict[tuple[int, ...], tuple] = {}  # shape -> a tensor's shape (constexprs) and numel

    def shape_key(shape) -> tuple[int, ...] | None:  # a list, tuple or tl.tuple of plain ints: its ints
        values = shape.values if type(shape) is lang_tuple else shape
        if type(values) is not list and type(values) is not tuple:
            return None
        for v in values:  # a loop, not all(): this runs on every op
            if type(v) is not int:
                return None
        return tuple(values)

    def block_type_init(self, element_ty, shape) -> None:
        key = shape_key(shape)
        known = blocks.get(key) if key is not None else None
        if known is None:
            block_init(self, element_ty, shape)
            if key is not None:
                blocks[key] = (self.shape, self.numel, str(self.shape))
            return
        self.element_ty = element_ty
        self.shape, self.numel, text = known
        self.name = f"<{text}, {element_ty}>"  # Triton's name: the shape's text, then the element type's

    def tensor_init_once(self, handle, type) -> None:
        key = shape_key(type.shape) if type.is_block() else None
        known = tensors.get(key) if key is not None else None
        if known is None:
            tensor_init(self, handle, type)
            if key is not None:
                tensors[key] = (self.shape, self.numel)
            return
        self.handle, self.type, self.dtype = handle, type, type.scalar
        self.shape, self.numel = known

    undos = [set_attr(tl.core.block_type, "__init__", block_type_init),
             set_attr(tl.core.tensor, "__init__", tensor_init_once)]
    return lambda: undo_all(undos)


# (10) The interpreter patches each triton.language builtin (tl.load, tensor.__add__, ...) with a lambda that
# copies the call's keyword arguments into a new dict without `_semantic` and passes its own; the builtin's
# wrapper then checks that `_semantic` is given and calls the function: two frames and a dict per op of every
# program. No error, a cost: about a tenth of FLA's layer time. The shim patches in one closure that sets the
# interpreter's `_semantic` (replacing any the caller gave, as the lambda does) and calls the function the
# wrapper wraps; a member that is not Triton's builtin wrapper (its code) goes through the interpreter's patch.
# Applied first (TRITON_SHIMS): the interpreter never restores a nested @triton.jit call's patch of a module
# its launch had not patched, so the members patched while the other shims' probes run keep that patch for
# the process (later patches pass over them: no longer builtins); applied first, they are this shim's closures.
BUILTIN_COST = "two frames and a keyword dict between each builtin call and the builtin"


def _builtins_needed() -> bool:
    from gdn_verify import triton_probes

    return triton_probes.builtin_frames()[0] > 1


def _builtins_patch() -> Callable[[], None]:
    from triton import language as tl
    from triton.runtime import interpreter

    patch_attr, semantic = interpreter._patch_attr, interpreter.interpreter_semantic
    wrapper_code = tl.core.builtin(lambda: None).__code__  # every @builtin's wrapper runs this code

    def patch_direct(obj, name, member, builder, scope) -> None:
        if getattr(member, "__code__", None) is not wrapper_code:
            return patch_attr(obj, name, member, builder, scope)
        fn = member.__wrapped__

        def direct(*args, **kwargs):
            kwargs["_semantic"] = semantic  # a fresh dict per call: the caller's is never changed
            return fn(*args, **kwargs)

        scope.set_attr(obj, name, direct)

    return set_attr(interpreter, "_patch_attr", patch_direct)


# (11) Two blocks of one rank and different shapes ([BT, 1] with [1, BK], a row with a tile) broadcast to their
# common shape; the interpreter compares each operand's shape with it as triton.language tuples (a tuple against
# a list: the list normalised into a new tuple on each comparison), two comparisons per op. No error, a cost:
# about a tenth of FLA's layer time. The shim computes the common shape and compares over the shapes' ints, as
# Triton's loop does, and broadcasts with the interpreter's builder; blocks of different ranks, a scalar, and
# incompatible dimensions (Triton's refusal) go to the interpreter's broadcast.
BROADCAST_INTS_COST = "each operand's shape compared with the common one as triton.language tuples"


def _broadcast_ints_needed() -> bool:
    from gdn_verify import triton_probes

    return triton_probes.broadcasts([([4, 1], [1, 4])])[0] > 0


def _broadcast_ints_patch() -> Callable[[], None]:
    from types import MethodType

    from triton import language as tl
    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    broadcast = semantic.broadcast_impl_value  # bound: the instance's (broadcast-same-shape's) or the class's

    def common_shape(lhs: list[int], rhs: list[int]) -> list[int] | None:  # Triton's rule; None: incompatible
        shape = []
        for left, right in zip(lhs, rhs, strict=True):
            if left == 1:
                shape.append(right)
            elif right == 1 or right == left:
                shape.append(left)
            else:
                return None
        return shape

    wrap = "make_tensor" if hasattr(semantic, "make_tensor") else "tensor"  # what this Triton's broadcast calls

    def to_shape(self, x, shape: list[int]):  # Triton's broadcast of one operand, by the interpreter's builder
        handle, ty = self.builder.create_broadcast(x.handle, shape), tl.block_type(x.type.scalar, shape)
        return getattr(self, wrap)(handle, ty)

    def over_ints(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if not (lhs_ty.is_block() and rhs_ty.is_block()):
            return broadcast(lhs, rhs)
        lhs_shape, rhs_shape = list(lhs_ty.shape), list(rhs_ty.shape)
        shape = common_shape(lhs_shape, rhs_shape) if len(lhs_shape) == len(rhs_shape) else None
        if shape is None:
            return broadcast(lhs, rhs)
        if lhs_shape != shape:
            lhs = to_shape(self, lhs, shape)
        if rhs_shape != shape:
            rhs = to_shape(self, rhs, shape)
        return lhs, rhs

    had = "broadcast_impl_value" in vars(semantic)
    semantic.broadcast_impl_value = MethodType(over_ints, semantic)  # this instance only
    return lambda: setattr(semantic, "broadcast_impl_value", broadcast) if had else \
        delattr(semantic, "broadcast_impl_value")


TRITON_SHIMS = (  # builtins-called-direct first: (10)
    Shim("builtins-called-direct", BUILTIN_COST, _builtins_needed, _builtins_patch),
    Shim("autotune-one-config", AUTOTUNE_ERROR, _autotune_needed, _autotune_patch),
    Shim("range-var-tensor", RANGE_ERROR, _range_needed, _range_patch),
    Shim("splat-keeps-dtype", SPLAT_ERROR, _splat_needed, _splat_patch),
    Shim("bf16-values", BF16_WRONG, _bf16_needed, _bf16_patch),
    Shim("patch-lang-once", PATCH_COST, _patch_once_needed, _patch_once_patch),
    Shim("overflow-checks-dropped", OVERFLOW_COST, _overflow_checks_needed, _overflow_checks_patch),
    Shim("np-dtype-table-once", NP_DTYPE_COST, _np_dtype_needed, _np_dtype_patch),
    Shim("broadcast-same-shape", BROADCAST_COST, _same_shape_needed, _same_shape_patch),
    Shim("block-shapes-once", SHAPES_COST, _shapes_needed, _shapes_patch),
    Shim("broadcast-int-shapes", BROADCAST_INTS_COST, _broadcast_ints_needed, _broadcast_ints_patch),
)
