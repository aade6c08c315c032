"""Hugging Face Qwen3-Next's GatedDeltaNet (the bridge's hf-qwen3-next adapter) in torch fp64 on a layer-level
file of `gdn-verify reference` (bench/make_layer_file), forward and backward with every gradient, THD one
sequence per call as the adapter runs it. Prints the seconds of that run (inputs loaded beforehand).
    python bench/hf_layer.py LAYER.safetensors THREADS HIDDEN HK HV DK DV
"""

import sys
import time

import torch
from safetensors.torch import load_file

from gdn_verify import names
from gdn_verify.adapters.hf_qwen3_next import HfQwen3NextAdapter
from gdn_verify.names import Geometry


def main() -> None:
    path, threads, *dims = sys.argv[1:]
    torch.set_num_threads(int(threads))
    tensors = load_file(path)
    hf = HfQwen3NextAdapter()
    module = hf.build_module(Geometry(*map(int, dims)), torch.float64)
    hf.load_megatron_params(module, {n: t for n, t in tensors.items() if n not in (names.HIDDEN, names.GRAD_OUTPUT,
                                                                                    names.CU_SEQLENS)})
    hidden = tensors[names.HIDDEN].requires_grad_()
    cu = tensors[names.CU_SEQLENS].tolist()
    start = time.perf_counter()
    out = torch.cat([module(hidden[b:e].transpose(0, 1)).transpose(0, 1) for b, e in zip(cu, cu[1:])])
    out.backward(tensors[names.GRAD_OUTPUT])
    print(f"{time.perf_counter() - start:.1f}")


if __name__ == "__main__":
    main()
