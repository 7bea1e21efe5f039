"""Embeddings under CompileConfig.weight_format (issue 44): their tables held compressed,
shared with a head tied to them, and still only gathered from (never read whole per call)."""

from __future__ import annotations

import pytest
import torch
import transformers
from e2e.test_compressed_weights import agreement

import tensortorrent as tt
from tensortorrent.capture import normalize
from tensortorrent.compression import Int4Linear, Int8Linear, compressed_model
from tensortorrent.compression.embedding import CompressedEmbedding
from tensortorrent.compression.int4_linear import dequantized
from tiny_transformers import DECODER, VOCAB, built, logits


def tied_llama() -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**DECODER, tie_word_embeddings=True)).eval()


@pytest.mark.parametrize(("weight_format", "head", "floor"), [("int8", Int8Linear, 0.999), ("int4", Int4Linear, 0.99)])
def test_a_head_tied_to_its_embedding_shares_one_compressed_table(weight_format, head, floor):
    model = tied_llama()
    ids = torch.randint(0, VOCAB, (4, 16))
    config = tt.CompileConfig(weight_format=weight_format, group_size=32)
    compiled = tt.compile(model, (ids,), config, devices="cpu")
    embedding, lm_head = compiled.model.model.embed_tokens, compiled.model.lm_head
    assert isinstance(embedding, CompressedEmbedding) and isinstance(lm_head, head)
    assert embedding.weight is lm_head.weight and embedding.weight_scale is lm_head.weight_scale
    assert model.model.embed_tokens.weight is model.lm_head.weight  # the model given is left as it was
    eager = compressed_model(model, weight_format, group_size=32)
    torch.testing.assert_close(logits(compiled(ids)), logits(eager(ids)), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        cosine, _ = agreement(logits(compiled(ids)), logits(model(ids)))
    assert cosine >= floor


@pytest.mark.parametrize("weight_format", ["int8", "int4"])
def test_an_untied_embedding_is_int8_and_only_gathered_from(weight_format):
    model = built("llama")
    copy = compressed_model(model, weight_format, group_size=32)
    table = copy.model.embed_tokens
    # A lookup reads a few rows per call, so int4 would save no streaming: int8, per row.
    assert isinstance(table, CompressedEmbedding) and table.weight.dtype == torch.int8
    ids = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        rows = table(ids)
        torch.testing.assert_close(rows, model.model.embed_tokens(ids), rtol=0, atol=table.weight_scale.max().item())
    program = normalize(torch.export.export(copy, (ids,), kwargs={"use_cache": False}))
    gathered = {name for b in program.bound if b.slot in program.gathered_slots for name in b.names}
    assert {"model.embed_tokens.weight", "model.embed_tokens.weight_scale"} <= gathered


def test_an_int4_embedding_gathers_the_rows_of_its_tokens():
    model = tied_llama()
    copy = compressed_model(model, "int4", group_size=32)
    table, head = copy.model.embed_tokens, copy.lm_head
    every_row = dequantized(head.weight, head.weight_scale, 32, head.rows_per_block, torch.float32)
    ids = torch.tensor([[0, 15, 16, 31], [32, 63, 64, 127]])  # both halves of a block, in two blocks
    with torch.no_grad():
        torch.testing.assert_close(table(ids), every_row[ids], rtol=0, atol=1e-7)
