"""Probe images exactly as `gdn-verify probe dump` writes them (docs/DESIGN.md §5, §8).

DIR/inputs.safetensors          the case: natural-order hidden_states, cu_seqlens (THD), every parameter
                                under Megatron's name, grad_output, all F64; the config in metadata
DIR/<mode>.rank<r>.safetensors  rank r's zigzag shard of out and grad_hidden (storage dtype), the CP-summed
                                grad::<param> (state dtype, every rank's copy), optionally every named
                                stage as F64 [rows, cols] with rows::<stage> and cols::<stage> (I64);
                                metadata names the run that wrote it
DIR/meta.json                   image, case, dtype, seed, backend (the image's identity), versions,
                                geometry, modes.<mode> (world, run id)

A mode's dump is written in docs/DESIGN.md §8's order: meta.json without the mode, every rank file, then
meta.json declaring the mode with its world and run id, so a reader never takes a dump cut short, or a
rank file of another run, for a whole one.

Every file is laid out by gdn_verify.safetensors_file as the C++ writer lays it out, so `gdn-verify probe
compare`, `cross-mode` and `oracle` read a PyTorch image unchanged. `write_kernel_file` writes the
kernel-level files of §5 (gdn_verify.kernel_dump); nothing else in the package writes an image or
kernel file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import torch
from safetensors.torch import save_file

from gdn_verify import names
from gdn_verify.cases import Case
from gdn_verify.safetensors_file import SAFETENSORS_DTYPE, ImageError, read_safetensors, safetensors_bytes, write_atomic

MODES = ("cp1", "headwise", "chunkwise", "all_gather")
INPUTS = "inputs.safetensors"
META = "meta.json"
INPUTS_NOTE = "inputs rounded to the dtype the implementation stored them in, written exactly as F64"
ROWS_PREFIX = "rows::"
COLS_PREFIX = "cols::"
SUMMED_KEY = "summed_stages"


@dataclass
class Stage:
    """One named stage as a rank computed it: data[i, j] is row rows[i], full-layer column cols[j] of the
    stage's natural-order tensor (rows: THD packed token, SBHD b S + s; docs/DESIGN.md §8)."""

    name: str  # "stage::<s>" or "stage_grad::<s>"
    data: torch.Tensor  # [len(rows), len(cols)], any float dtype; written F64 (exact widening)
    rows: Sequence[int]
    cols: Sequence[int]
    summed: bool = False  # a partial over CP ranks, summed on reassembly


@dataclass
class RankDump:
    """What one rank of one mode writes: <mode>.rank<r>.safetensors."""

    mode: str
    rank: int
    world: int
    out: torch.Tensor  # the rank's zigzag shard, storage dtype
    grad_hidden: torch.Tensor
    grads: dict[str, torch.Tensor]  # Megatron name -> CP-summed gradient, state dtype
    stages: list[Stage] | None = None  # None: the dump holds no stages


@dataclass
class Image:
    """An image read back: the inputs, each mode's rank files in rank order, and meta.json."""

    inputs: dict[str, torch.Tensor]
    inputs_metadata: dict[str, str]
    ranks: dict[str, list[tuple[dict[str, torch.Tensor], dict[str, str]]]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def rank_path(directory: Path, mode: str, rank: int) -> Path:
    return Path(directory) / f"{mode}.rank{rank}.safetensors"


def inputs_tensors(case: Case) -> dict[str, torch.Tensor]:
    """inputs.safetensors' tensors: the layer-level file of docs/DESIGN.md §5, all F64 (cu_seqlens I64)."""
    tensors = {n: t.to(torch.float64) for n, t in case.params.items()}
    tensors[names.HIDDEN] = case.hidden_states.to(torch.float64)
    tensors[names.GRAD_OUTPUT] = case.grad_output.to(torch.float64)
    if case.cu_seqlens is not None:
        tensors[names.CU_SEQLENS] = torch.tensor(case.cu_seqlens, dtype=torch.int64)
    return tensors


def dtype_label(case: Case) -> str:
    """The storage dtype as the image's metadata spells it (safetensors names: F32, BF16, F64)."""
    return SAFETENSORS_DTYPE[case.torch_dtype]


def inputs_metadata(case: Case, image: str) -> dict[str, str]:
    meta = case.geometry.metadata()
    meta.update({"image": image, "case": case.spec.name, "seed": str(case.seed), "dtype": dtype_label(case),
                 "note": INPUTS_NOTE})
    return meta


def state_dtype(case: Case) -> torch.dtype:
    """Gradients are kept in the state dtype: fp32, fp64 for fp64 storage (docs/DESIGN.md §4)."""
    return torch.float64 if case.torch_dtype == torch.float64 else torch.float32


def new_run_id() -> str:
    """A fresh run id (probes/image.cpp `new_run_id`): 16 hex digits, shared by one dump's files."""
    return secrets.token_hex(8)


def rank_tensors(dump: RankDump, case: Case, image: str,
                 run_id: str = "") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A rank file's tensors and metadata (probes/image.cpp `rank_tensors`)."""
    tensors = {"out": dump.out.detach().to(case.torch_dtype),
               "grad_hidden": dump.grad_hidden.detach().to(case.torch_dtype)}
    for name, g in dump.grads.items():
        tensors["grad::" + name] = g.detach().to(state_dtype(case))
    metadata = {"image": image, "mode": dump.mode, "rank": str(dump.rank), "world": str(dump.world),
                "case": case.spec.name, "dtype": dtype_label(case), "run": run_id}
    if dump.stages is not None:
        for s in dump.stages:
            if s.name in tensors:
                raise ImageError(f"stage '{s.name}' recorded twice on one rank: the image holds one piece per rank")
            tensors[s.name] = s.data.detach().to(torch.float64).reshape(len(s.rows), len(s.cols))
            tensors[ROWS_PREFIX + s.name] = torch.tensor(list(s.rows), dtype=torch.int64)
            tensors[COLS_PREFIX + s.name] = torch.tensor(list(s.cols), dtype=torch.int64)
        metadata[SUMMED_KEY] = ",".join(s.name for s in dump.stages if s.summed)
    return tensors, metadata


def geometry_json(case: Case) -> dict:
    """meta.json's geometry (probes/image.cpp `geometry`)."""
    g = case.geometry
    out = {"hidden_size": g.hidden_size, "linear_num_key_heads": g.Hk, "linear_num_value_heads": g.Hv,
           "linear_key_head_dim": g.dk, "linear_value_head_dim": g.dv,
           "linear_conv_kernel_dim": g.linear_conv_kernel_dim, "format": case.spec.format}
    if case.spec.format == "thd":
        out["lengths"] = list(case.spec.lengths)
    else:
        out["seq_len"], out["batch"] = case.spec.seq_len, case.spec.batch
    out["conv_bias"], out["gates"] = g.conv_bias, case.spec.gates
    return out


def identity(case: Case, image: str, backend: str) -> dict:
    """What makes two dumps the same image of the same case: one DIR holds only one."""
    return {"image": image, "case": case.spec.name, "dtype": dtype_label(case), "seed": case.seed, "backend": backend}


def read_meta(directory: Path) -> dict:
    path = Path(directory) / META
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ImageError(f"{path}: not valid UTF-8 JSON ({e}): remove the directory and dump again") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("modes", {}), dict):
        raise ImageError(f"{path}: not the object of modes meta.json holds: remove the directory and dump again")
    return meta


def check_same_image(meta: dict, wanted: dict, directory: Path) -> None:
    """ImageError when DIR already holds another image (probes/image.cpp `check_same_image`)."""
    for key, value in wanted.items():
        if meta and meta.get(key) != value:
            have = json.dumps(meta[key]) if key in meta else "unset"
            raise ImageError(f"{directory} holds an image with {key} {have}, not {json.dumps(value)}: "
                             "dump into a fresh --out directory")


def write_image(directory: Path, case: Case, image: str, backend: str, dumps: Sequence[RankDump],
                transport: str = "inproc", extra_meta: Mapping | None = None, run_id: str | None = None) -> None:
    """Writes one mode's dump of `case` into DIR: every rank file, inputs.safetensors and meta.json.

    Everything is encoded before the first byte is written, so bad input leaves DIR as it was; each file
    is replaced atomically, meta.json first without the mode and last declaring it (with its world and
    `run_id`, which every rank file carries; default a fresh one), so a write cut short leaves the mode
    undeclared, which the readers refuse. Rank files of an earlier dump of the mode on more ranks are
    removed. `extra_meta` adds top-level meta.json keys (the adapter, the path it ran, library
    versions); `backend` is part of the image's identity. A multi-process dump gathers every rank's
    RankDump to one process and calls this once."""
    directory = Path(directory)
    modes = {d.mode for d in dumps}
    if len(modes) != 1 or next(iter(modes)) not in MODES:
        raise ImageError(f"one write holds one mode's rank files, of {', '.join(MODES)}; got {sorted(modes)}")
    mode, world = dumps[0].mode, dumps[0].world
    if sorted(d.rank for d in dumps) != list(range(world)) or any(d.world != world for d in dumps):
        raise ImageError(f"{mode}: rank files 0..{world - 1} of one world are needed, got ranks "
                         f"{sorted(d.rank for d in dumps)}")
    run_id = run_id or new_run_id()
    wanted = identity(case, image, backend)
    meta = read_meta(directory)
    check_same_image(meta, wanted, directory)
    ranks = {rank_path(directory, mode, d.rank): safetensors_bytes(*rank_tensors(d, case, image, run_id))
             for d in dumps}
    inputs = safetensors_bytes(inputs_tensors(case), inputs_metadata(case, image))
    if not meta:
        meta = dict(wanted)
        meta["geometry"] = geometry_json(case)
        meta["modes"] = {}
    meta.update(extra_meta or {})
    meta["modes"].pop(mode, None)
    write_atomic(directory / INPUTS, inputs)
    write_atomic(directory / META, meta_bytes(meta))
    for path, data in ranks.items():
        write_atomic(path, data)
    for stale in directory.glob(f"{mode}.rank*.safetensors"):
        if stale not in ranks:
            stale.unlink()
    meta["modes"][mode] = {"world": world, "run": run_id, "transport": transport,
                           "stages": dumps[0].stages is not None}
    write_atomic(directory / META, meta_bytes(meta))


def meta_bytes(meta: dict) -> bytes:
    return (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()


def write_kernel_file(path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> None:
    """A kernel-level file of docs/DESIGN.md §5 (tensors as given, any dtype safetensors holds), written by
    safetensors' own `save_file` to a temporary file beside `path`, then renamed: a reader never sees half
    a file. `save_file` orders the metadata keys by a per-process hash, so two runs' files hold the same
    header and tensors but not always the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, tmp, metadata=dict(metadata))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def modes_in(directory: Path) -> list[str]:
    """The modes meta.json declares in DIR, in docs/DESIGN.md §8's order."""
    declared = read_meta(directory).get("modes", {})
    return [m for m in MODES if m in declared]


def read_image(directory: Path) -> Image:
    """An image back from DIR as meta.json declares it; ImageError naming a missing rank file, one of
    another run, or one meta.json does not declare (docs/DESIGN.md §8)."""
    directory = Path(directory)
    if not (directory / INPUTS).exists():
        raise ImageError(f"'{directory}' holds no {INPUTS}: pass a directory written by 'gdn-verify probe dump' "
                         "or 'python -m gdn_verify.dump'")
    inputs, metadata = read_safetensors(directory / INPUTS)
    image = Image(inputs, metadata, meta=read_meta(directory))
    for mode in modes_in(directory):
        entry = image.meta["modes"][mode]
        files = []
        for rank in range(entry["world"]):
            path = rank_path(directory, mode, rank)
            if not path.exists():
                raise ImageError(f"{path.name} missing: meta.json declares {mode} on {entry['world']} rank(s); "
                                 f"dump --mode {mode} again")
            files.append(read_safetensors(path))
            if files[-1][1].get("run") != entry.get("run"):
                raise ImageError(f"{path.name}: written by run {files[-1][1].get('run')}, meta.json's {mode} dump is "
                                 f"run {entry.get('run')}: a file of another dump; dump --mode {mode} again")
        image.ranks[mode] = files
    for path in sorted(directory.glob("*.rank*.safetensors")):
        mode, _, number = path.name[:-len(".safetensors")].partition(".rank")
        declared = mode in image.ranks and number.isdigit() and str(int(number)) == number
        if not declared or int(number) >= len(image.ranks[mode]):
            raise ImageError(f"{path.name}: not a rank file meta.json declares (an orphan, or a dump that did not "
                             "finish): remove it or dump that mode again")
    return image


def stages_of(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> list[Stage]:
    """A rank file's stages back as the rank recorded them."""
    summed = set(filter(None, metadata.get(SUMMED_KEY, "").split(",")))
    return [Stage(n, t, tensors[ROWS_PREFIX + n].tolist(), tensors[COLS_PREFIX + n].tolist(), n in summed)
            for n, t in sorted(tensors.items()) if re.match(r"stage(_grad)?::", n)]
