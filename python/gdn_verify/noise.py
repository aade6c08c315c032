"""A third-party implementation's own spread, and the gate it sets (docs/DESIGN.md §4, "Gates from an
implementation's own spread").

The same implementation runs its case twice: as given, and with every input and parameter moved by ULPS
units in the last place of its storage dtype (signs from the seeded counter PRNG, zeros left alone). The
relative RMS of the two runs' difference, tensor by tensor, is the implementation's own condition x
rounding on this case; a tensor then meets min(its class's oracle gate, max(M x spread, FLOOR)).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from gdn_verify.cases import Case
from gdn_verify.rng import hashes, stream_of

ULPS = 2
# M: twice the largest error/spread of unmodified FLA 0.6.0's GatedDeltaNet.forward over 700 tensors of the FLA
# gate's fp32 cases, seeds 0-19 (fla-wide 0-9): 9.75, fla-strong's grad::A_log at seed 19, where FLA's
# chunk-local cumsum error is mostly smooth in its inputs (the decay gradients reach 5.5 under weak gates, every
# other tensor 1.63; docs/DESIGN.md §4), so that a false alarm needs an error twice as far beyond its spread as
# any measured.
M = 20.0
# A spread of zero (a tensor the perturbation does not move) still allows four fp32 roundings of relative RMS
# delta = 2^-24 / sqrt(3) each, added linearly: 4 delta = 1.4e-7, under FLA's smallest fp32 error measured (1.8e-7).
FLOOR = 4 * 2.0**-24 / 3**0.5
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16}
STORAGE = ("fp32", "bf16")  # the dtypes a case is nudged in


def nudged(t: torch.Tensor, dtype: torch.dtype, seed: int, name: str, ulps: int = ULPS) -> torch.Tensor:
    """`t` (F64 holding `dtype` values) with each non-zero element moved `ulps` representable values of
    `dtype` up or down in magnitude, the sign from hashes(seed, stream_of("perturb/" + name), i)."""
    flat = t.reshape(-1)
    odd = hashes(seed, stream_of("perturb/" + name), np.arange(flat.numel(), dtype=np.uint64)) & np.uint64(1)
    signs = torch.from_numpy(odd.astype(np.int64) * 2 - 1)
    bits = flat.to(dtype).view(_BITS[dtype]).to(torch.int64)
    moved = torch.where(flat != 0, bits + signs * ulps, bits).to(_BITS[dtype]).view(dtype)
    return moved.to(torch.float64).reshape(t.shape)


def perturbed(case: Case, seed: int, ulps: int = ULPS) -> Case:
    """The case with hidden_states, grad_output and every parameter nudged (`nudged`) in its storage dtype."""
    dtype = case.torch_dtype
    return dataclasses.replace(
        case, params={n: nudged(p, dtype, seed, n, ulps) for n, p in case.params.items()},
        hidden_states=nudged(case.hidden_states, dtype, seed, "hidden_states", ulps),
        grad_output=nudged(case.grad_output, dtype, seed, "grad_output", ulps))


def spreads(run: Mapping[str, torch.Tensor], twin: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Each tensor's rel_rms(twin - run) against run's RMS (0 where run is all zeros)."""
    out = {}
    for name, a in run.items():
        a, b = a.double(), twin[name].double()
        scale = a.pow(2).mean().sqrt()
        out[name] = float((b - a).pow(2).mean().sqrt() / scale) if scale > 0 else 0.0
    return out


def first_outside(report: Mapping, spread: Mapping[str, float]) -> str | None:
    """None when every tensor of a `probe oracle --json` report is within min(class gate, max(M x spread,
    FLOOR)), else the first (in the report's propagation order) that is not, with its numbers."""
    for t in report["tensors"]:
        error, ratio = t.get("rel_rms"), t.get("error_ratio")
        if not error or not ratio or t["name"] not in spread:
            continue
        gate = error / ratio
        bound = min(gate, max(M * spread[t["name"]], FLOOR))
        if error > bound:
            return (f"{t['name']}: rel_rms {error:.3e} > {M:g} x its own spread {spread[t['name']]:.3e} "
                    f"({ULPS} ulps; class gate {gate:.3e})")
    return None


def load_dump(directory: Path, mode: str = "cp1") -> dict[str, torch.Tensor]:
    """Rank 0's tensors of `mode` in an image directory (a cp1 dump is one rank)."""
    from safetensors.torch import load_file

    return load_file(directory / f"{mode}.rank0.safetensors")


def twin_verdict(report: Mapping, image: Path, twin: Path, mode: str = "cp1") -> str | None:
    """`first_outside` of an image's `probe oracle --json` report, the spread measured between the image and its
    nudged twin (both directories holding `mode`'s rank 0)."""
    return first_outside(report, spreads(load_dump(image, mode), load_dump(twin, mode)))


def reproduce_twin(out: str, dump: str) -> str:
    """The shell commands that rebuild a cp1 image in `out` and its nudged twin in `out`-twin with `dump` (a
    `python -m gdn_verify.dump ...` line without --out), then show each tensor's error (`probe oracle`) and
    its spread (`compare IMAGE TWIN`)."""
    return (f"rm -rf {out} {out}-twin && {dump} --out {out} && {dump} --nudge {ULPS} --out {out}-twin && "
            f"gdn-verify probe oracle --dir {out} && gdn-verify compare {out}/cp1.rank0.safetensors "
            f"{out}-twin/cp1.rank0.safetensors")
