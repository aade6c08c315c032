"""Adapter for Megatron-Core's `GatedDeltaNet` (megatron.core.ssm.gated_delta_net); README.md maps its
concerns to this package's files.

Megatron's parameter names are the image's names (docs/DESIGN.md §1.3), so a TP = 1 state dict maps as
is. A TP-sharded module (TP size t) holds on rank r, as Megatron's forward splits it:

| name | rank r's shard | full tensor |
|---|---|---|
| `in_proj.weight` | rows `[q_r, k_r, v_r, z_r, beta_r, alpha_r]`, each section / t | per section, the ranks' pieces in rank order |
| `conv1d.weight`, `conv1d.bias` | channels `[q_r, k_r, v_r]` | the same, over q, k, v |
| `A_log`, `dt_bias` | value heads `[r Hv/t, (r+1) Hv/t)` | concatenated |
| `out_proj.weight` | columns `[r Hv dv/t, ...)` (row-parallel) | concatenated along columns |
| `in_proj.layer_norm_weight`, `out_norm.weight` | replicated | rank 0's (all must be equal) |

so gathering is section-major, like Megatron's sharded checkpoint (`sharded_state_dict` splits
in_proj into query, key, value, z, beta, alpha). Transformer Engine's `_extra_state` entries carry no
parameter and are left out.
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

from gdn_verify.adapters.megatron.adapter import MegatronAdapter
from gdn_verify.adapters.megatron.capability import has_linear_cp_mode, import_from, rank_has_linear_cp_mode
from gdn_verify.adapters.megatron.groups import initialize
from gdn_verify.adapters.megatron.params import gather_tp, shard_tp
from gdn_verify.adapters.megatron.ranks import rank_run
from gdn_verify.adapters.megatron.rows import cp_rows

__all__ = ["MegatronAdapter", "cp_rows", "gather_tp", "has_linear_cp_mode", "import_from", "initialize",
           "rank_has_linear_cp_mode", "rank_run", "shard_tp"]
