"""Python side of the probe-dump interop test: a dump of case thd-gva (fp32, headwise, 2 ranks) as a
PyTorch user sees it with `safetensors`."""
import json
import sys

from safetensors import safe_open
from safetensors.numpy import load_file

d = sys.argv[1]
# hidden 64, Hk 4, Hv 8, dk = dv = 16: q, k 64 wide, v, z 128, beta, alpha 8; conv over q, k, v.
params = {"in_proj.layer_norm_weight": (64,), "in_proj.weight": (2 * 64 + 2 * 128 + 2 * 8, 64),
          "conv1d.weight": (64 + 64 + 128, 1, 4), "A_log": (8,), "dt_bias": (8,), "out_norm.weight": (16,),
          "out_proj.weight": (64, 128)}

inputs = load_file(f"{d}/inputs.safetensors")
assert inputs["hidden_states"].shape == (224, 1, 64), inputs["hidden_states"].shape
assert inputs["grad_output"].shape == (224, 1, 64)
assert inputs["cu_seqlens"].tolist() == [0, 128, 192, 224], inputs["cu_seqlens"]
for name, shape in params.items():
    assert inputs[name].shape == shape, (name, inputs[name].shape, shape)
with safe_open(f"{d}/inputs.safetensors", framework="numpy") as f:
    meta = f.metadata()
    assert meta["hidden_size"] == "64" and meta["linear_num_value_heads"] == "8", meta
    assert meta["image"] == "py" and meta["case"] == "thd-gva", meta

for rank in (0, 1):
    shard = load_file(f"{d}/headwise.rank{rank}.safetensors")
    assert shard["out"].shape == (112, 1, 64) and str(shard["out"].dtype) == "float32", shard["out"].shape
    assert shard["grad_hidden"].shape == (112, 1, 64)
    for name, shape in params.items():
        assert shard["grad::" + name].shape == shape, name
    with safe_open(f"{d}/headwise.rank{rank}.safetensors", framework="numpy") as f:
        assert f.metadata()["rank"] == str(rank) and f.metadata()["world"] == "2", f.metadata()

meta = json.load(open(f"{d}/meta.json"))
assert meta["modes"]["headwise"]["world"] == 2 and meta["image"] == "py", meta
