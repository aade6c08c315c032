"""Kernel-level dumps (docs/DESIGN.md §5): a gated delta rule call, or a causal conv1d call.

`dump_kernel` runs one call of a kernel with flash-linear-attention's `chunk_gated_delta_rule`
signature (gdn_verify.fla_kernels), forward and backward, and writes two files into a directory:

- `inputs.safetensors`: `q k v g beta` as given, optional `initial_state cu_seqlens do dht`, metadata
  `scale`, `use_qk_l2norm`, `chunk_size`: the kernel-level input `gdn-verify reference --in` reads;
- `outputs.safetensors`: `o final_state` and, with `do`, `dq dk dv dg dbeta dh0`, widened exactly to F64
  (the dtype `reference` writes, so `gdn-verify compare` matches them tensor by tensor).

`dump_conv` does the same for FLA's `causal_conv1d`: `x weight [bias initial_state cu_seqlens dy dht]`
in (metadata `activation`), `y final_state [dx dweight dbias dh0]` out. Both files are written by
`images.write_kernel_file`.

Judge either with::

    gdn-verify reference --in DIR/inputs.safetensors --out DIR/reference.safetensors
    gdn-verify compare DIR/reference.safetensors DIR/outputs.safetensors --policy POLICY

(`write_policy` writes POLICY), or in one command on seeded inputs, `python -m gdn_verify.kernel`.

The default kernel is FLA's Triton `chunk_gated_delta_rule` on a CUDA tensor or under Triton's
interpreter, else `fla_torch_kernel`, FLA's own pure-torch references behind the same signature. The
metadata `path` says which ran.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from gdn_verify import images
from gdn_verify.fla_kernels import Kernel, KernelDumpError, default_kernel

GRAD_NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
CONV_GRADS = ("dx", "dweight", "dbias", "dh0")


def _check_call(q, k, v, g, beta, initial_state, cu_seqlens, do, dht) -> None:
    """Shapes as §5 reads them, checked before the kernel runs, so a bad call writes nothing."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise KernelDumpError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: q and k must be "
                              "[B, T, Hk, K] and v [B, T, Hv, V]")
    B, T, Hk, K = q.shape
    Hv, V = v.shape[2], v.shape[3]
    if Hv % Hk:
        raise KernelDumpError(f"Hv = {Hv} is not a multiple of Hk = {Hk}: give Hv % Hk == 0 (GVA)")
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != (B, T, Hv):
            raise KernelDumpError(f"{name} is {tuple(t.shape)}; it must be [B, T, Hv] = {(B, T, Hv)}")
    if cu_seqlens is not None:
        cu = [int(c) for c in cu_seqlens.tolist()]
        if B != 1 or not cu or cu[0] != 0 or cu[-1] != T or any(b > e for b, e in zip(cu, cu[1:])):
            raise KernelDumpError(f"cu_seqlens {cu} with B = {B}, T = {T}: packed sequences need B == 1 and "
                                  "cu_seqlens rising from 0 to T")
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    state = (N, Hv, K, V)
    for name, t in (("initial_state", initial_state), ("dht", dht)):
        if t is not None and tuple(t.shape) != state:
            raise KernelDumpError(f"{name} is {tuple(t.shape)}; it must be [N, Hv, K, V] = {state}")
    if do is not None and do.shape != v.shape:
        raise KernelDumpError(f"do is {tuple(do.shape)}; it must be the shape of o, [B, T, Hv, V] = {tuple(v.shape)}")
    if dht is not None and do is None:
        raise KernelDumpError("dht is given without do: give do to get gradients")


def _metadata(scale: float | None, use_qk_l2norm: bool, chunk_size: int, kernel: Kernel, dtype: torch.dtype,
              ) -> dict[str, str]:
    """§5's kernel metadata; `repr` of a float is the shortest decimal that round-trips, as §5 asks."""
    return {
        "scale": "default 1/sqrt(K)" if scale is None else repr(float(scale)),
        "use_qk_l2norm": "true" if use_qk_l2norm else "false",
        "chunk_size": str(chunk_size),
        "path": getattr(kernel, "path", "unknown"),
        "source": getattr(kernel, "source", getattr(kernel, "__qualname__", "unknown")),
        "dtype": str(dtype).removeprefix("torch."),
    }


def _run(kernel: Kernel, q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, chunk_size, do, dht,
         ) -> dict[str, torch.Tensor]:
    """One forward (and with do one backward) of the kernel on fresh leaves; the outputs §5 names.

    A zero initial state is passed when none is given, so the kernel returns dh0 as the oracle does.
    """
    leaves = [t.detach().clone().requires_grad_(do is not None) for t in (q, k, v, g, beta)]
    N = q.shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
    if initial_state is None:
        h0 = torch.zeros(N, v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32, device=v.device)
    else:
        h0 = initial_state.detach().clone()
    h0.requires_grad_(do is not None)
    with torch.set_grad_enabled(do is not None):
        o, final_state = kernel(*leaves, scale=scale, initial_state=h0, output_final_state=True,
                                use_qk_l2norm_in_kernel=use_qk_l2norm, cu_seqlens=cu_seqlens, chunk_size=chunk_size)
        out = {"o": o.detach(), "final_state": final_state.detach()}
        if do is None:
            return out
        loss = (o * do.to(o.dtype)).sum()
        if dht is not None:
            loss = loss + (final_state * dht.to(final_state.dtype)).sum()
        grads = torch.autograd.grad(loss, [*leaves, h0], allow_unused=True)
    for name, leaf, grad in zip(GRAD_NAMES, [*leaves, h0], grads):
        out[name] = grad if grad is not None else torch.zeros_like(leaf)
    return out


def dump_kernel(out_dir: str | os.PathLike, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor, *, scale: float | None = None, initial_state: torch.Tensor | None = None,
                cu_seqlens: torch.Tensor | None = None, use_qk_l2norm_in_kernel: bool = False,
                chunk_size: int = 64, do: torch.Tensor | None = None, dht: torch.Tensor | None = None,
                kernel: Kernel | None = None) -> dict[str, torch.Tensor]:
    """Run `kernel` (default: `default_kernel(q.device)`) on the call and write its §5 files into out_dir.

    `g` is the log decay and `beta` the write strength as `chunk_gated_delta_rule` takes them by default
    (not the raw gate inputs of `use_gate_in_kernel` / `use_beta_sigmoid_in_kernel`). Returns the outputs
    as the kernel computed them. Every argument is checked before the kernel runs and both files are
    written only after it has, each atomically.
    """
    _check_call(q, k, v, g, beta, initial_state, cu_seqlens, do, dht)
    if scale is not None and not math.isfinite(scale):
        raise KernelDumpError(f"scale = {scale} is not finite: give a finite scale or None for 1/sqrt(K)")
    kernel = kernel or default_kernel(q.device)
    out = _run(kernel, q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm_in_kernel, chunk_size,
               do, dht)
    inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    optional = {"initial_state": initial_state, "do": do, "dht": dht,
                "cu_seqlens": None if cu_seqlens is None else cu_seqlens.to(torch.int64)}
    inputs.update({n: t for n, t in optional.items() if t is not None})
    _write_files(out_dir, inputs, out, _metadata(scale, use_qk_l2norm_in_kernel, chunk_size, kernel, q.dtype))
    return out


def policy_for(dtype: torch.dtype) -> dict:
    """A `gdn-verify compare` policy judging a kernel dump by relative RMS against the fp64 oracle.

    fp32: the kernel tests' 1e-5 (docs/DESIGN.md §4: 64-term blocked sums grow eps to ~5e-7, times a
    chunk-solve condition ~10). bf16: the contract's 2e-3 GDN gate (§4, kernel tests, bf16). fp64 runs
    in fp32 inside FLA's references and kernels, so it gets the fp32 gate.
    """
    return {"default": {"max_rel_rms": 2e-3 if dtype == torch.bfloat16 else 1e-5}}


def write_policy(path: str | os.PathLike, dtype: torch.dtype) -> None:
    """`policy_for(dtype)` as a JSON file for `gdn-verify compare --policy`."""
    Path(path).write_text(json.dumps(policy_for(dtype)) + "\n")


def dump_conv(out_dir: str | os.PathLike, x: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
              initial_state: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
              dy: torch.Tensor | None = None, dht: torch.Tensor | None = None,
              activation: str = "silu") -> dict[str, torch.Tensor]:
    """FLA's Triton `causal_conv1d` on the call, forward (with the final state) and with `dy` backward
    (`dht` the final state's gradient); writes the §5 conv kernel files. Returns the outputs."""
    # FLA 0.6.0 keeps it in fla.modules.causal_conv1d, 0.4.2 in fla.modules.conv
    where = "fla.modules.causal_conv1d" if importlib.util.find_spec("fla.modules.causal_conv1d") else "fla.modules.conv"
    causal_conv1d = importlib.import_module(where).causal_conv1d
    if dht is not None and dy is None:
        raise KernelDumpError("dht is given without dy: give dy to get gradients")
    named = {"x": x, "weight": weight, "bias": bias, "initial_state": initial_state}
    leaves = {n: t.detach().clone().requires_grad_(dy is not None) for n, t in named.items() if t is not None}
    with torch.set_grad_enabled(dy is not None):
        y, final_state = causal_conv1d(leaves["x"], leaves["weight"], leaves.get("bias"),
                                       initial_state=leaves.get("initial_state"), output_final_state=True,
                                       activation=activation, cu_seqlens=cu_seqlens)
        out = {"y": y.detach(), "final_state": final_state.detach()}
        if dy is not None:
            loss = (y * dy.to(y.dtype)).sum()
            if dht is not None:
                loss = loss + (final_state * dht.to(final_state.dtype)).sum()
            grads = torch.autograd.grad(loss, list(leaves.values()))
            out.update({CONV_GRADS[list(named).index(n)]: g for n, g in zip(leaves, grads)})
    inputs = {n: t for n, t in named.items() if t is not None}
    inputs.update({n: t for n, t in (("dy", dy), ("dht", dht)) if t is not None})
    if cu_seqlens is not None:
        inputs["cu_seqlens"] = cu_seqlens.to(torch.int64)
    meta = {"activation": activation, "path": "triton", "source": "flash-linear-attention causal_conv1d",
            "dtype": str(x.dtype).removeprefix("torch.")}
    _write_files(out_dir, inputs, out, meta)
    return out


def _write_files(out_dir: str | os.PathLike, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor],
                 metadata: dict[str, str]) -> None:
    """The call's two §5 files: inputs as given, outputs widened exactly to F64, each written atomically."""
    directory = Path(out_dir)
    images.write_kernel_file(directory / "inputs.safetensors", inputs, metadata)
    images.write_kernel_file(directory / "outputs.safetensors", {n: t.to(torch.float64) for n, t in outputs.items()},
                             metadata)
