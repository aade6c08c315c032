"""Dump a Megatron-Core GatedDeltaNet under context parallelism as a gdn-verify image, one file per rank.

    torchrun --nproc-per-node W python/examples/megatron_cp_dump.py --mode chunkwise --case thd-gva --out DIR
    gdn-verify probe oracle --dir DIR        # and probe cross-mode / compare against a cp1 dump

Every process takes the case's inputs (gdn_verify.cases.make_case, bit for bit the C++ case), keeps its
zigzag shard of hidden_states and grad_output (docs/DESIGN.md §2: chunks r and 2W-1-r of every
sequence), runs the module's forward and backward under CP, and writes `<mode>.rank<r>.safetensors`:
its shard of out and grad_hidden, and the parameter gradients summed over the CP group. Rank 0 writes
inputs.safetensors and meta.json once every rank has written (docs/DESIGN.md §8).

It needs GPUs: Megatron-Core's GatedDeltaNet is built on CUDA with Transformer Engine's fused
norm + column-parallel in_proj, and its CP (headwise, chunkwise, all_gather) is the module's own. The
`module` argument of `dump_rank` is where a test puts a stand-in; the writing itself runs anywhere
(tests/test_distributed.py checks it on CPU with the gloo backend against `gdn-verify layout`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from gdn_verify import images
from gdn_verify.cases import Case, make_case
from gdn_verify.layouts import zigzag_rows

MODES = ("headwise", "chunkwise", "all_gather")

# (module, case, hidden shard [rows, 1, hidden], cu_seqlens) -> out shard; the module holds the case's
# parameters under Megatron's names and runs its CP mode over the default process group.
CpModule = Callable[[torch.nn.Module, Case, torch.Tensor], torch.Tensor]


def dump_rank(directory: Path, case: Case, mode: str, module: torch.nn.Module, forward: CpModule,
              image: str = "megatron") -> None:
    """This process's rank file; rank 0 then adds inputs.safetensors and meta.json (after a barrier)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = torch.tensor(zigzag_rows(case, world, rank))
    flat = case.hidden_states.reshape(-1, case.geometry.hidden_size)
    hidden = flat[rows].to(case.torch_dtype).unsqueeze(1).requires_grad_()
    out = forward(module, case, hidden)
    out.backward(case.grad_output.reshape(flat.shape)[rows].to(out.dtype).unsqueeze(1))
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters()}
    for g in grads.values():
        dist.all_reduce(g)  # parameter gradients are CP-summed in the image (docs/DESIGN.md §8)
    dump = images.RankDump(mode, rank, world, out.detach().squeeze(1), hidden.grad.squeeze(1), grads)
    tensors, metadata = images.rank_tensors(dump, case, image)
    images.write_safetensors(images.rank_path(directory, mode, rank), tensors, metadata)
    dist.barrier()
    if rank == 0:
        write_inputs_and_meta(directory, case, mode, world, image)
    dist.barrier()


def write_inputs_and_meta(directory: Path, case: Case, mode: str, world: int, image: str) -> None:
    """inputs.safetensors and meta.json as images.write_image writes them, for a world written rank by rank."""
    images.write_safetensors(directory / images.INPUTS, images.inputs_tensors(case),
                             images.inputs_metadata(case, image))
    meta = images.read_meta(directory) or dict(images.identity(case, image, "cuda"),
                                               geometry=images.geometry_json(case), modes={})
    meta["modes"][mode] = {"world": world, "transport": "nccl", "stages": False}
    (directory / images.META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def megatron_forward(module: torch.nn.Module, case: Case, hidden: torch.Tensor) -> torch.Tensor:
    """Megatron-Core's GatedDeltaNet on this rank's shard, its CP mode set by the module's config."""
    out, _ = module(hidden.cuda(), attention_mask=None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--case", default="thd-gva")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    case = make_case(args.case, args.seed, args.dtype)
    from gdn_verify.adapters import megatron

    module = megatron.build_module(case.geometry, case.torch_dtype, "cuda", cp_mode=args.mode)
    megatron.load_megatron_params(module, case.params)
    args.out.mkdir(parents=True, exist_ok=True)
    dump_rank(args.out, case, args.mode, module, megatron_forward)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
