"""Python side of the safetensors interop test: checks the file gdn-verify wrote, then writes one."""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open

d = sys.argv[1]
ours = load_file(f"{d}/ours.safetensors")
assert ours["q"].dtype == np.float64 and ours["q"].shape == (2, 2), ours["q"]
assert ours["q"].tolist() == [[1.5, -2.25], [0.0, 3.0]], ours["q"]
assert ours["cu_seqlens"].dtype == np.int64 and ours["cu_seqlens"].tolist() == [0, 3, 7]
assert ours["grad::in_proj.weight"].dtype == np.float16
assert ours["grad::in_proj.weight"].tolist() == [0.5, 1.0, -1.0]
with safe_open(f"{d}/ours.safetensors", framework="numpy") as f:
    assert f.metadata() == {"scale": "0.37", "use_qk_l2norm": "true"}, f.metadata()

save_file({"k": (np.arange(6, dtype=np.float32) * 0.25).reshape(2, 3),
           "ids": np.array([7, -1], dtype=np.int32)},
          f"{d}/theirs.safetensors", metadata={"producer": "python-safetensors"})
