"""`python -m gdn_verify.kernel`: FLA's Triton kernels on seeded inputs, dumped and judged in one command.

    python -m gdn_verify.kernel --op chunk|fused_recurrent|conv1d --dtype fp32|bf16 --out DIR

runs FLA's Triton kernel (on a CPU under Triton's interpreter, gdn_verify.triton_cpu), writes the §5
kernel files with gdn_verify.kernel_dump (docs/DESIGN.md §5), then judges them with::

    gdn-verify reference --in DIR/inputs.safetensors --out DIR/reference.safetensors
    gdn-verify compare DIR/reference.safetensors DIR/outputs.safetensors --policy DIR/policy.json

and exits with compare's code; a conv1d failure also lists the rows over the gate.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch

from gdn_verify import cli, triton_cpu
from gdn_verify.fla_kernels import KernelDumpError, fla_triton_kernel
from gdn_verify.kernel_dump import dump_conv, dump_kernel, policy_for, write_policy

# Packed sequences shorter than the conv window, within one 64-token chunk, and over three chunks (so a
# middle chunk, with a chunk boundary on each side); four value heads per key head; initial states; do/dy
# and dht. The chunk kernel at production head dims (dk = dv = 128: the state kernels' second K and V
# blocks run; ~10 CPU-s under the interpreter); fused_recurrent, which loops over every token of every
# head, at dk = dv = 32 (~5 CPU-s; at 128 it takes ~30).
GDR_GEOMETRY: dict[str, dict[str, Any]] = {
    "chunk": {"cu_seqlens": (0, 37, 170), "Hk": 1, "Hv": 4, "K": 128, "V": 128},
    "fused_recurrent": {"cu_seqlens": (0, 37, 170), "Hk": 1, "Hv": 4, "K": 32, "V": 32}}
CONV_GEOMETRY: dict[str, Any] = {"cu_seqlens": (0, 2, 37, 170), "D": 16, "W": 4}
# Every TINY-th token's q and k rows scaled to |x|^2 ~ 1e-6, the L2 norm's eps (docs/DESIGN.md §1): there
# x / sqrt(|x|^2 + eps) differs from the unit vector by ~30%, so where the kernel adds eps (outside the root,
# dropped) moves those rows by O(1); on the other rows, |x|^2 ~ K, the eps is below fp32's resolution.
TINY = 8
OPS = ("chunk", "fused_recurrent", "conv1d")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.kernel",
                description="Dump one call of FLA's Triton kernel on seeded inputs and judge it with gdn-verify "
                            "reference + compare (exit code: compare's).")
    p.add_argument("--op", required=True, help=" | ".join(OPS))
    p.add_argument("--dtype", default="fp32", help=" | ".join(DTYPES))
    p.add_argument("--seed", default="0", help="seed of the inputs (a non-negative integer)")
    p.add_argument("--out", required=True, help="directory for inputs, outputs, reference and policy")
    p.add_argument("--no-slot0-grad", action="store_true",
                   help="conv1d: no gradient into the final state's slot 0, which FLA's backward drops (the gate's "
                        "call; docs/DESIGN.md §14)")
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
    g = GDR_GEOMETRY[op]
    cu = torch.tensor(g["cu_seqlens"], dtype=torch.int64)
    N, T, Hk, Hv, K, V = len(cu) - 1, int(cu[-1]), g["Hk"], g["Hv"], g["K"], g["V"]
    call = {"q": _tiny_rows(randn(1, T, Hk, K)), "k": _tiny_rows(randn(1, T, Hk, K)), "v": randn(1, T, Hv, V),
            "g": (-torch.nn.functional.softplus(randn(1, T, Hv, dt=torch.float64)) * 0.5).to(dtype),
            "beta": torch.sigmoid(randn(1, T, Hv, dt=torch.float64)).to(dtype),
            "initial_state": randn(N, Hv, K, V, scale=0.1, dt=torch.float32), "cu_seqlens": cu}
    if op == "chunk":  # FLA's fused_recurrent has no backward
        call.update(do=randn(1, T, Hv, V), dht=randn(N, Hv, K, V, scale=0.1, dt=torch.float32))
    return call


def _tiny_rows(x: torch.Tensor) -> torch.Tensor:
    """x with tokens 3, 3 + TINY, ... scaled by 1e-3 / sqrt(K): |x|^2 ~ 1e-6 there (TINY)."""
    x[:, 3::TINY] *= 1e-3 / x.shape[-1] ** 0.5
    return x


def differing_rows(directory: Path, policy: dict, cu_seqlens: torch.Tensor) -> list[str]:
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
        triton_cpu.enable_fla()
    except (cli.BadInput, KernelDumpError, triton_cpu.TritonCpuError) as e:
        return cli.error(str(e))
    call = dump(args.op, DTYPES[args.dtype], int(args.seed), out, slot0_grad=not args.no_slot0_grad)
    print(f"gdn_verify.kernel: FLA's Triton {args.op} ({args.dtype}, seed {args.seed}, Triton interpreter shims: "
          f"{', '.join(triton_cpu.applied()) or 'none'}) -> {out}")
    ref = reference(binary, out)
    if ref.returncode != 0:
        print(ref.stdout + ref.stderr, end="", file=sys.stderr)
        return ref.returncode
    cmp = subprocess.run([binary, "compare", out / "reference.safetensors", out / "outputs.safetensors",
                          "--policy", out / "policy.json"], capture_output=True, text=True)
    print(cmp.stdout + cmp.stderr, end="")
    if cmp.returncode == 1 and args.op == "conv1d":
        for line in differing_rows(out, policy_for(DTYPES[args.dtype]), call["cu_seqlens"]):
            print(line)
    return cmp.returncode


def dump(op: str, dtype: torch.dtype, seed: int, out: Path, slot0_grad: bool = True) -> dict[str, torch.Tensor]:
    """FLA's Triton `op` on the seeded call, its kernel files and policy written into `out`; returns the call.
    `slot0_grad=False` zeroes the conv's `dht` slot 0: the gradient of a slot no consumer of the state reads
    (FLA's next call, Megatron), which FLA's backward drops (docs/DESIGN.md §14, "The final conv state's slot 0")."""
    call = _seeded_inputs(op, dtype, seed)
    if op == "conv1d":
        if not slot0_grad:
            call["dht"][..., 0] = 0
        dump_conv(out, **call)
    else:
        q, k, v, g, beta = (call.pop(n) for n in ("q", "k", "v", "g", "beta"))
        dump_kernel(out, q, k, v, g, beta, use_qk_l2norm_in_kernel=True, kernel=fla_triton_kernel(op), **call)
    write_policy(out / "policy.json", dtype)
    return call


def rank_dumps(rank, root: str, dtype: str, ops: tuple[str, ...]) -> None:
    """A World rank function (fla_gate's kernel step): on rank 0, `dump` of each op on seed 0 into
    root/kernel-<op>, the conv without dht's slot 0."""
    if rank.rank == 0:
        triton_cpu.enable_fla()
        for op in ops:
            dump(op, DTYPES[dtype], 0, Path(root) / f"kernel-{op}", slot0_grad=False)


def reference(binary: str, out: Path):
    """`gdn-verify reference` of the kernel files in `out` (the fp64 oracle's answer beside FLA's)."""
    import subprocess

    return subprocess.run([binary, "reference", "--in", out / "inputs.safetensors", "--out",
                           out / "reference.safetensors"], capture_output=True, text=True)


if __name__ == "__main__":
    raise SystemExit(main())
