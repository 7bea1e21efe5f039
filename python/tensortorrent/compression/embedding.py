"""An embedding whose table is held compressed: int8 rows or packed int4 groups (weight-only).

The table is quantized exactly as a linear layer's weight [rows, features] is (int8: a
scale per row; int4: a scale per group of features, packed in the blocked layout of
int4_linear), so an embedding and a language model's head that share one table (tied
weights) share its compressed values and scales too. A lookup gathers the rows of its
tokens with aten.embedding (int4: the blocks of rows that hold them, then the row's
nibbles), so the table stays a weight that calls only gather from: mapped from its file,
never read whole per call (capture/program.py gathered_slots).
"""

from __future__ import annotations

import torch
from torch import nn

from .int4_linear import Int4Linear
from .int8_linear import Int8Linear


class CompressedEmbedding(nn.Module):
    """nn.Embedding's lookup from a compressed table: `weight` (int8 [rows, features], or
    uint8 [rows, features / 2] packed int4) and `weight_scale` (per row [rows], or per
    group [rows, features / group_size]); inference only."""

    def __init__(self, table: Int8Linear | Int4Linear) -> None:
        super().__init__()
        # The same Parameters as `table`'s: a head tied to this embedding stays tied.
        self.weight, self.weight_scale = table.weight, table.weight_scale
        self.group_size = getattr(table, "group_size", None)
        self.rows_per_block = getattr(table, "rows_per_block", None)
        self.num_embeddings, self.embedding_dim = table.out_features, table.in_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.group_size is None:
            values = nn.functional.embedding(ids, self.weight).to(self.weight_scale.dtype)
            return values * nn.functional.embedding(ids, self.weight_scale.view(-1, 1))
        return self._int4_rows(ids)

    def _int4_rows(self, ids: torch.Tensor) -> torch.Tensor:
        block, features = self.rows_per_block, self.embedding_dim
        half = block // 2
        blocks = self.weight.view(-1, features * half)  # a block's bytes: [feature, row % half]
        gathered = nn.functional.embedding(ids // block, blocks).view(*ids.shape, features, half)
        within = (ids % half).unsqueeze(-1).unsqueeze(-1).expand(*ids.shape, features, 1)
        packed = torch.gather(gathered, -1, within).squeeze(-1).to(torch.int32)
        shift = ((ids % block) >= half).to(torch.int32).unsqueeze(-1) * 4
        nibbles = (packed >> shift) & 0xF
        scale = nn.functional.embedding(ids, self.weight_scale)
        values = (nibbles - 8).to(scale.dtype).view(*ids.shape, scale.shape[-1], self.group_size)
        return (values * scale.unsqueeze(-1)).view(*ids.shape, features)

    def extra_repr(self) -> str:
        kind = "int8 per row" if self.group_size is None else f"int4 in groups of {self.group_size}"
        return f"{self.num_embeddings}, {self.embedding_dim}, {kind}"
