"""Kernel-level dumps (docs/DESIGN.md §5): a gated delta rule call, or a causal conv1d call.

`dump_kernel` runs one call of a kernel with flash-linear-attention's `chunk_gated_delta_rule`
signature, forward and backward, and writes two files into a directory:

- `inputs.safetensors`: `q k v g beta` as given, optional `initial_state cu_seqlens do dht`, metadata
  `scale`, `use_qk_l2norm`, `chunk_size`: the kernel-level input `gdn-verify reference --in` reads;
- `outputs.safetensors`: `o final_state` and, with `do`, `dq dk dv dg dbeta dh0`, widened exactly to F64
  (the dtype `reference` writes, so `gdn-verify compare` matches them tensor by tensor).

`dump_conv` does the same for FLA's `causal_conv1d`: `x weight [bias initial_state cu_seqlens dy dht]`
in (metadata `activation`), `y final_state [dx dweight dbias dh0]` out.

Judge either with::

    gdn-verify reference --in DIR/inputs.safetensors --out DIR/reference.safetensors
    gdn-verify compare DIR/reference.safetensors DIR/outputs.safetensors --policy POLICY

or in one command, FLA's Triton kernels (on a CPU under Triton's interpreter, gdn_verify.triton_cpu) on
seeded inputs::

    python -m gdn_verify.kernel --op chunk|fused_recurrent|conv1d --dtype fp32|bf16 --out DIR

The default kernel is FLA's Triton `chunk_gated_delta_rule` on a CUDA tensor or under Triton's
interpreter, else `fla_torch_kernel`, FLA's own pure-torch references behind the same signature. The
metadata `path` says which ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from gdn_verify import triton_cpu

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]

L2NORM_EPS = 1e-6  # the core's in-kernel L2 norm epsilon (docs/DESIGN.md §1.1)
GRAD_NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


class KernelDumpError(ValueError):
    """A call that cannot be dumped; the message names the argument and the fix."""


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """`x / sqrt(sum x^2 + 1e-6)` over the head dim, as the core's in-kernel L2 norm (docs/DESIGN.md §1.1).

    FLA's own l2norm is a Triton kernel only, so the torch path needs this one formula.
    """
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2NORM_EPS)


def _sequences(T: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int]]:
    """The packed sequences' [begin, end) token ranges; the whole T when not packed."""
    if cu_seqlens is None:
        return [(0, T)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:]))


def fla_torch_kernel(form: str = "recurrent") -> Kernel:
    """FLA's pure-torch reference (`naive_recurrent_gated_delta_rule`, or `naive_chunk_gated_delta_rule`
    with form "chunk") behind `chunk_gated_delta_rule`'s signature.

    The references take one sequence batch with as many key as value heads, no in-kernel L2 norm and
    beta before g; this wrapper adds what the Triton kernel does around them: GVA (value head h reads key
    head h / (Hv / Hk), by repeating key heads), packed sequences (one call per sequence) and the L2 norm.
    The references compute in fp32 whatever the input dtype.
    """
    from fla.ops.gated_delta_rule import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

    if form not in ("recurrent", "chunk"):
        raise KernelDumpError(f"fla_torch_kernel: form '{form}' is not one of recurrent, chunk")

    def one_sequence(q, k, v, g, beta, scale, h0, chunk_size):
        if form == "chunk":
            return naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, scale=scale,
                                                initial_state=h0, output_final_state=True)
        return naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale, initial_state=h0,
                                                output_final_state=True)

    def kernel(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, **unused):
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        group = v.shape[2] // q.shape[2]
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        outs, states = [], []
        for n, (b, e) in enumerate(_sequences(q.shape[1], cu_seqlens)):
            rows = slice(b, e)
            if cu_seqlens is None:
                h0 = initial_state
            else:
                h0 = None if initial_state is None else initial_state[n:n + 1]
            o, state = one_sequence(q[:, rows], k[:, rows], v[:, rows], g[:, rows], beta[:, rows], scale, h0,
                                    chunk_size)
            outs.append(o)
            states.append(state)
        return torch.cat(outs, dim=1), (torch.cat(states, dim=0) if output_final_state else None)

    kernel.path = "torch"  # type: ignore[attr-defined]
    kernel.source = f"flash-linear-attention naive_{form}_gated_delta_rule"  # type: ignore[attr-defined]
    return kernel


def fla_triton_kernel(op: str = "chunk") -> Kernel:
    """FLA's Triton `chunk_gated_delta_rule`, or `fused_recurrent_gated_delta_rule` (op "fused_recurrent",
    forward only in FLA) behind `chunk_gated_delta_rule`'s signature."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    if op not in ("chunk", "fused_recurrent"):
        raise KernelDumpError(f"fla_triton_kernel: op '{op}' is not one of chunk, fused_recurrent")

    def kernel(q, k, v, g, beta, chunk_size=64, **options):
        if op == "chunk":
            return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, **options)
        return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **options)

    kernel.path = "triton"  # type: ignore[attr-defined]
    kernel.source = f"flash-linear-attention {op}_gated_delta_rule"  # type: ignore[attr-defined]
    return kernel


def default_kernel(device: torch.device) -> Kernel:
    """FLA's Triton kernel where Triton can run (a CUDA device, or its interpreter), else FLA's pure-torch
    reference."""
    if device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return fla_triton_kernel("chunk")
    return fla_torch_kernel("recurrent")


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


def _save_atomic(tensors: dict[str, torch.Tensor], metadata: dict[str, str], path: Path) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, tmp, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


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
    meta = _metadata(scale, use_qk_l2norm_in_kernel, chunk_size, kernel, q.dtype)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    _save_atomic(inputs, meta, directory / "inputs.safetensors")
    _save_atomic({n: t.to(torch.float64) for n, t in out.items()}, meta, directory / "outputs.safetensors")
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


CONV_GRADS = ("dx", "dweight", "dbias", "dh0")


def dump_conv(out_dir: str | os.PathLike, x: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
              initial_state: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
              dy: torch.Tensor | None = None, dht: torch.Tensor | None = None,
              activation: str = "silu") -> dict[str, torch.Tensor]:
    """FLA's Triton `causal_conv1d` on the call, forward (with the final state) and with `dy` backward
    (`dht` the final state's gradient); writes the §5 conv kernel files. Returns the outputs."""
    from fla.modules.causal_conv1d import causal_conv1d

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
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    _save_atomic(inputs, meta, directory / "inputs.safetensors")
    _save_atomic({n: t.to(torch.float64) for n, t in out.items()}, meta, directory / "outputs.safetensors")
    return out


# python -m gdn_verify.kernel: FLA's Triton kernels on seeded inputs, dumped and judged in one command.
# Small geometry (the interpreter costs ~1-3 CPU-s a kernel call): packed sequences shorter than the
# conv window, within one 64-token chunk and across two; GVA; initial states; do/dy and dht.
GDR_GEOMETRY: dict[str, Any] = {"cu_seqlens": (0, 37, 100), "Hk": 2, "Hv": 4, "K": 32, "V": 32}
CONV_GEOMETRY: dict[str, Any] = {"cu_seqlens": (0, 2, 37, 100), "D": 16, "W": 4}
OPS = ("chunk", "fused_recurrent", "conv1d")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise KernelDumpError(f"{message}: see python -m gdn_verify.kernel --help")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m gdn_verify.kernel",
                description="Dump one call of FLA's Triton kernel on seeded inputs and judge it with gdn-verify "
                            "reference + compare (exit code: compare's).")
    p.add_argument("--op", required=True, help=" | ".join(OPS))
    p.add_argument("--dtype", default="fp32", help=" | ".join(DTYPES))
    p.add_argument("--seed", default="0", help="seed of the inputs (a non-negative integer)")
    p.add_argument("--out", required=True, help="directory for inputs, outputs, reference and policy")
    p.add_argument("--gdn-verify", default=os.environ.get("GDNV_BIN", "gdn-verify"),
                   help="the gdn-verify binary (default $GDNV_BIN, else gdn-verify on PATH)")
    return p


def _seeded_inputs(op: str, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """The call's tensors from torch's generator seeded with `seed`; storage tensors rounded to `dtype`,
    states in fp32 as FLA keeps them."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0, dt: torch.dtype = dtype) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dt)

    if op == "conv1d":
        g = CONV_GEOMETRY
        cu = torch.tensor(g["cu_seqlens"], dtype=torch.int64)
        N, T, D, W = len(cu) - 1, int(cu[-1]), g["D"], g["W"]
        return {"x": randn(1, T, D), "weight": randn(D, W, scale=0.5), "bias": randn(D, scale=0.3),
                "initial_state": randn(N, D, W), "cu_seqlens": cu, "dy": randn(1, T, D), "dht": randn(N, D, W)}
    g = GDR_GEOMETRY
    cu = torch.tensor(g["cu_seqlens"], dtype=torch.int64)
    N, T, Hk, Hv, K, V = len(cu) - 1, int(cu[-1]), g["Hk"], g["Hv"], g["K"], g["V"]
    call = {"q": randn(1, T, Hk, K), "k": randn(1, T, Hk, K), "v": randn(1, T, Hv, V),
            "g": (-torch.nn.functional.softplus(randn(1, T, Hv, dt=torch.float64)) * 0.5).to(dtype),
            "beta": torch.sigmoid(randn(1, T, Hv, dt=torch.float64)).to(dtype),
            "initial_state": randn(N, Hv, K, V, scale=0.1, dt=torch.float32), "cu_seqlens": cu}
    if op == "chunk":  # FLA's fused_recurrent has no backward
        call.update(do=randn(1, T, Hv, V), dht=randn(N, Hv, K, V, scale=0.1, dt=torch.float32))
    return call


def _differing_rows(directory: Path, policy: dict, cu_seqlens: torch.Tensor) -> list[str]:
    """For each conv tensor over its gate, the rows whose own rel_rms (against the tensor's reference RMS) is
    over it: tokens as (sequence, position) for [B, T, D] tensors, (sequence, slot) for [N, D, W] states,
    slots for the [D, W] weight."""
    from safetensors.torch import load_file

    ref, cand = load_file(directory / "reference.safetensors"), load_file(directory / "outputs.safetensors")
    gate = policy["default"]["max_rel_rms"]
    starts = cu_seqlens.tolist()[:-1]
    lines = []
    for name in sorted(ref):
        r, c = ref[name], cand[name]
        scale = r.pow(2).mean().sqrt()
        if name in cand and ((c - r).pow(2).mean().sqrt() > gate * scale):
            if name in ("final_state", "dh0"):  # [N, D, W]: per (sequence, slot) over the channels
                row_err, label = (c - r).pow(2).mean(dim=1).sqrt(), lambda i: f"(sequence {i[0]}, slot {i[1]})"
            elif name == "dweight":  # [D, W]: per slot
                row_err, label = (c - r).pow(2).mean(dim=0).sqrt(), lambda i: f"slot {i[0]}"
            elif r.dim() == 3:  # [1, T, D]: per token
                row_err = (c - r)[0].pow(2).mean(dim=1).sqrt()

                def label(i, starts=starts):
                    n = max(j for j, s in enumerate(starts) if s <= i[0])
                    return f"token {i[0]} (sequence {n}, position {i[0] - starts[n]})"
            else:
                continue
            rows = [label(tuple(i)) for i in (row_err > gate * scale).nonzero().tolist()]
            lines.append(f"{name}: rows over the gate {gate:g} (per-row rms error / tensor rms): {', '.join(rows)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    import shutil
    import subprocess
    import sys

    try:
        args = _parser().parse_args(argv)
        if args.op not in OPS:
            raise KernelDumpError(f"unknown --op '{args.op}': use {', '.join(OPS)}")
        if args.dtype not in DTYPES:
            raise KernelDumpError(f"unknown --dtype '{args.dtype}': use {', '.join(DTYPES)}")
        if not args.seed.isdigit() or int(args.seed) >= 2**63:
            raise KernelDumpError(f"--seed '{args.seed}' is not an integer in [0, 2^63): e.g. --seed 0")
        binary = shutil.which(args.gdn_verify)
        if binary is None:
            raise KernelDumpError(f"--gdn-verify '{args.gdn_verify}' is not an executable: build gdn-verify and "
                                  "pass its path (or set GDNV_BIN)")
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise KernelDumpError(f"--out '{out}' is a file: give a directory")
        triton_cpu.enable()
    except (KernelDumpError, triton_cpu.TritonCpuError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    dtype = DTYPES[args.dtype]
    call = _seeded_inputs(args.op, dtype, int(args.seed))
    if args.op == "conv1d":
        dump_conv(out, **call)
    else:
        q, k, v, g, beta = (call.pop(n) for n in ("q", "k", "v", "g", "beta"))
        dump_kernel(out, q, k, v, g, beta, use_qk_l2norm_in_kernel=True, kernel=fla_triton_kernel(args.op), **call)
    write_policy(out / "policy.json", dtype)
    print(f"gdn_verify.kernel: FLA's Triton {args.op} ({args.dtype}, seed {args.seed}, Triton interpreter shims: "
          f"{', '.join(triton_cpu.applied()) or 'none'}) -> {out}")
    ref = subprocess.run([binary, "reference", "--in", out / "inputs.safetensors", "--out",
                          out / "reference.safetensors"], capture_output=True, text=True)
    if ref.returncode != 0:
        print(ref.stdout + ref.stderr, end="", file=sys.stderr)
        return ref.returncode
    cmp = subprocess.run([binary, "compare", out / "reference.safetensors", out / "outputs.safetensors",
                          "--policy", out / "policy.json"], capture_output=True, text=True)
    print(cmp.stdout + cmp.stderr, end="")
    if cmp.returncode == 1 and args.op == "conv1d":
        for line in _differing_rows(out, policy_for(dtype), call["cu_seqlens"]):
            print(line)
    return cmp.returncode


if __name__ == "__main__":
    raise SystemExit(main())
