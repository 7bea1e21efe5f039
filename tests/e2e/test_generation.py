"""tt.compile_for_generation (issue 43): the tokens Hugging Face's generate gives, from a
decode program and prefill programs sharing one KV cache, for GPT-2, Llama and Qwen3."""

from __future__ import annotations

import re
import threading
import time

import pytest
import torch
import transformers
from e2e.test_peaks import simulated_peaks

import tensortorrent as tt
from conftest import wait_until
from tensortorrent import core
from tensortorrent.compression import compressed_model
from tensortorrent.planning.fit import weight_bytes
from tiny_transformers import (
    DECODER,
    TRANSFORMERS_5,
    VOCAB,
    built,
    meta_model,
    needs_stacked_experts,
    qwen3_moe_config,
    saved_model,
)

MAX_LENGTH, BATCH = 24, 3
PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [20, 21, 22, 23, 24, 25, 26]]  # 7 tokens: chunks of 4, 2 and 1
STOP = VOCAB - 1  # an end token the tests choose


def left_padded(prompts: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, length - len(prompt) :] = torch.tensor(prompt)
        mask[row, length - len(prompt) :] = 1
    return ids, mask


def hugging_face(model, ids, mask, seed: int | None = None, **settings) -> torch.Tensor:
    if seed is not None:
        torch.manual_seed(seed)
    # top_k=0: no top-k cut unless asked (Hugging Face's default is 50).
    settings = {"top_k": 0, "eos_token_id": STOP, "pad_token_id": 0, **settings}
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, **settings)


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen3"])
def compiled(request):
    torch.manual_seed(0)
    model = built(request.param)
    generative = tt.compile_for_generation(
        model, max_length=MAX_LENGTH, batch_size=BATCH, prompt_buckets=[2, 4], devices="cpu"
    )
    yield model, generative
    generative.close()


def test_greedy_tokens_equal_hugging_faces_for_one_prompt_and_a_padded_batch(compiled):
    model, generative = compiled
    for prompts in (PROMPTS[:1], PROMPTS):
        ids, mask = left_padded(prompts)
        ours = generative.generate(ids, mask, max_new_tokens=10, eos_token_id=STOP, pad_token_id=0)
        torch.testing.assert_close(ours, hugging_face(model, ids, mask, max_new_tokens=10), rtol=0, atol=0)


@pytest.mark.parametrize(
    "settings",
    [dict(temperature=0.7), dict(top_k=5), dict(top_p=0.8, temperature=1.3), dict(repetition_penalty=1.5, top_k=20)],
)
def test_sampled_tokens_with_a_seed_equal_hugging_faces_after_manual_seed(compiled, settings):
    model, generative = compiled
    ids, mask = left_padded(PROMPTS)
    ours = generative.generate(
        ids, mask, max_new_tokens=8, do_sample=True, seed=7, eos_token_id=STOP, pad_token_id=0, **settings
    )
    theirs = hugging_face(model, ids, mask, seed=7, do_sample=True, max_new_tokens=8, **settings)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_a_row_that_ends_is_padded_and_generation_stops_when_every_row_has():
    torch.manual_seed(0)
    model = built("llama")
    generative = tt.compile_for_generation(model, max_length=16, batch_size=2, prompt_buckets=[4], devices="cpu")
    ids, mask = left_padded(PROMPTS[:2])
    free = generative.generate(ids, mask, max_new_tokens=6)
    stop = int(free[0, ids.shape[1] + 1])  # the first row's second new token ends it
    ended = generative.generate(ids, mask, max_new_tokens=6, eos_token_id=stop, pad_token_id=0)
    torch.testing.assert_close(ended, hugging_face(model, ids, mask, max_new_tokens=6, eos_token_id=stop))
    assert int(ended[0, ids.shape[1] + 1]) == stop and (ended[0, ids.shape[1] + 2 :] == 0).all()
    generative.close()


def test_a_streamer_hears_every_step_and_explain_names_the_programs_and_the_cache(compiled):
    _, generative = compiled
    ids, mask = left_padded(PROMPTS[:2])
    heard = []
    out = generative.generate(ids, mask, max_new_tokens=5, streamer=heard.append)
    assert torch.equal(torch.stack(heard, dim=1), out[:, ids.shape[1] :])
    text = generative.explain()
    assert "KV cache:" in text and "decode (3 x 1 token)" in text and "prefill (3 x 4 tokens)" in text
    assert generative.prompt_lengths == [2, 4] and generative.max_length == MAX_LENGTH


def test_bad_prompts_name_what_was_expected_and_what_was_given(compiled):
    _, generative = compiled
    ids, _ = left_padded(PROMPTS)
    with pytest.raises(
        tt.InvalidArgumentError, match=r"holds 4 prompt\(s\); this module was compiled for batch_size=3"
    ):
        generative.generate(torch.cat([ids, ids[:1]]), max_new_tokens=2)
    with pytest.raises(tt.InvalidArgumentError, match=r"need 30 positions of the KV cache; .* max_length=24"):
        generative.generate(ids, max_new_tokens=24)
    with pytest.raises(tt.InvalidArgumentError, match=r"expected a 2-D torch.int64 tensor .* got a 2-D torch.int32"):
        generative.generate(ids.int(), max_new_tokens=2)
    with pytest.raises(tt.InvalidArgumentError, match="prompts padded on the left"):
        generative.generate(ids, torch.flip(left_padded(PROMPTS)[1], [1]), max_new_tokens=2)
    with pytest.raises(tt.InvalidArgumentError, match="top_p: expected a float in"):
        generative.generate(ids, max_new_tokens=2, do_sample=True, top_p=1.5)


def test_what_cannot_generate_is_refused_clearly():
    with pytest.raises(tt.InvalidArgumentError, match="expected a Hugging Face causal LM"):
        tt.compile_for_generation(torch.nn.Linear(4, 4), max_length=8)
    with pytest.raises(tt.InvalidArgumentError, match="prompt_buckets: expected a list of prompt lengths from 2"):
        tt.compile_for_generation(built("llama"), max_length=8, prompt_buckets=[16])
    with pytest.raises(tt.InvalidArgumentError, match="max_length: expected an int >= 1, got 0"):
        tt.compile_for_generation(built("llama"), max_length=0)
    with pytest.raises(tt.InvalidArgumentError, match="max_length=40 exceeds the model's max_position_embeddings=32"):
        tt.compile_for_generation(built("gpt2"), max_length=40)


def test_tokens_are_the_same_streamed_under_half_the_weights_and_split_with_a_small_device():
    torch.manual_seed(0)
    model = built("llama")
    weights = weight_bytes(model)
    ids, mask = left_padded(PROMPTS[:2])
    expected = hugging_face(model, ids, mask, max_new_tokens=8)
    small = tt.VirtualDevice("small", memory_bytes=weights // 3, flops=1e12, link_bandwidth=2e10)
    placements = {
        "streamed": dict(devices="cpu", config=tt.CompileConfig(ram_budget_bytes=weights // 2)),
        "split": dict(devices=["cpu", "small"], machine=[small]),
    }
    for name, placement in placements.items():
        generative = tt.compile_for_generation(model, max_length=16, batch_size=2, prompt_buckets=[4], **placement)
        programs = generative.programs.values()
        if name == "streamed":  # the weights stream from disk on every token; the cache stays in RAM
            assert all(program.streams_weights for program in programs)
            # One resident set for them all: no program holds weights of its own.
            assert 0 < generative.shared_weight_bytes < weights // 2
            assert all(not program.resident_weight_slots for program in programs)
            assert "held in RAM once, shared by every program" in generative.explain()
            # The token embedding is mapped from disk: neither held nor streamed whole.
            table = model.get_input_embeddings().weight
            assert "Mapped from disk" in generative.explain() and "embed_tokens" in generative.explain()
        else:
            assert all({"cpu", "small"} == set(program.region_devices) for program in programs)
        out = generative.generate(ids, mask, max_new_tokens=8, eos_token_id=STOP, pad_token_id=0)
        torch.testing.assert_close(out, expected, rtol=0, atol=0, msg=name)
        if name == "streamed":  # each program's last call held the shared set and its own working set
            peaks = [program.last_peak_bytes["ram"] for program in programs]
            assert all(generative.shared_weight_bytes < peak <= weights // 2 for peak in peaks)
            decode_reads = generative.programs[1].last_report.bytes_read
            assert decode_reads <= weights - generative.shared_weight_bytes - table.nbytes
            # The resident weights are spread over the layers: each layer streams about as much.
            per_layer = streamed_bytes_by_layer(generative.programs[1].last_report)
            largest = max(p.nbytes for name, p in model.named_parameters() if ".layers." in name)
            assert len(per_layer) == model.config.num_hidden_layers
            assert max(per_layer.values()) - min(per_layer.values()) <= largest
        generative.close()


def streamed_bytes_by_layer(report) -> dict[str, int]:
    """The bytes a call's loads read, by decoder layer (`layers.N` in the region's name)."""
    by_layer: dict[str, int] = {}
    for record in report.records:
        layer = re.search(r"\.layers\.(\d+)\.", record.label)
        if record.kind == "load" and layer:
            by_layer[layer[1]] = by_layer.get(layer[1], 0) + record.bytes
    return by_layer


def test_a_cancelled_generation_stops_between_tokens_and_leaves_nothing_held(compiled):
    _, generative = compiled
    ids, mask = left_padded(PROMPTS)
    expected = generative.generate(ids, mask, max_new_tokens=6)
    heard, handles = [], []

    def listen(tokens):
        heard.append(tokens)
        if len(heard) == 2:
            while not handles:  # submit() has not returned yet on the test's thread
                time.sleep(0.001)
            handles[0].cancel()

    handle = generative.submit(ids, mask, max_new_tokens=6, streamer=listen)
    handles.append(handle)
    with pytest.raises(tt.ExecutionCancelled, match="cancelled after 2 new token"):
        handle.result(timeout=60)
    assert handle.done() and len(heard) == 2
    # Nothing stays held: no program call in flight, the module free, the next generation whole.
    assert all(not program._in_flight for program in generative.programs.values())
    assert generative.rows_in_use == 0
    assert torch.equal(generative.submit(ids, mask, max_new_tokens=6).result(timeout=60), expected)
    with pytest.raises(tt.InvalidArgumentError, match=r"unexpected argument\(s\) \['temprature'\]"):
        generative.submit(ids, max_new_tokens=2, temprature=0.5)


def test_a_generation_that_joins_a_running_one_gets_the_tokens_it_gets_alone(compiled):
    _, generative = compiled
    long, short = left_padded(PROMPTS[2:]), left_padded(PROMPTS[:2])
    alone = generative.generate(*long, max_new_tokens=12), generative.generate(*short, max_new_tokens=5)
    started, rows = threading.Event(), []

    def slowly(tokens):  # keeps the first generation running while the second joins
        started.set()
        time.sleep(0.05)

    first = generative.submit(*long, max_new_tokens=12, streamer=slowly)
    assert started.wait(60)
    second = generative.submit(*short, max_new_tokens=5, streamer=lambda tokens: rows.append(generative.rows_in_use))
    torch.testing.assert_close(first.result(timeout=60), alone[0], rtol=0, atol=0)
    torch.testing.assert_close(second.result(timeout=60), alone[1], rtol=0, atol=0)
    assert max(rows) == 3  # it joined while the first ran: the batch's three rows in use
    assert generative.rows_in_use == 0
    # The loop's thread ends once no generation is left: an idle module holds no thread,
    # and one never closed is freed at exit.
    assert wait_until(lambda: not any(t.name == "tt-decode-loop" for t in threading.enumerate()))


def test_a_meta_model_generates_from_a_sharded_checkpoint_read_in_place(tmp_path):
    model = saved_model("qwen3", tmp_path, sharded=True)
    ids, mask = left_padded(PROMPTS[:2])
    generative = tt.compile_for_generation(
        meta_model("qwen3"), max_length=16, batch_size=2, prompt_buckets=[4], checkpoint=tmp_path, devices="cpu"
    )
    assert all(program.streams_weights for program in generative.programs.values())
    out = generative.generate(ids, mask, max_new_tokens=8, eos_token_id=STOP, pad_token_id=0)
    torch.testing.assert_close(out, hugging_face(model, ids, mask, max_new_tokens=8), rtol=0, atol=0)
    generative.close()


@pytest.mark.skipif(not TRANSFORMERS_5, reason="transformers < 5 copies the cache for grouped heads (repeat_kv)")
def test_the_cache_is_counted_in_ram_and_a_decode_steps_peaks_equal_the_simulation():
    torch.manual_seed(0)
    model = built("llama")
    config = tt.CompileConfig(max_region_nodes=8)  # several regions: the decode program runs on the data plane
    generative = tt.compile_for_generation(
        model, max_length=16, batch_size=2, prompt_buckets=[4], config=config, devices="cpu"
    )
    decode = generative.programs[1]
    assert not decode.uses_direct_path
    layers, rows, kv_heads, head_dim, float32 = 2, 2, 2, 16, 4
    assert generative.kv_cache_bytes == 2 * layers * rows * kv_heads * 16 * head_dim * float32
    # The cache's buffers are bound tensors of every program, resident in RAM beside the weights.
    program = decode._plane.plan.program
    resident = sum(b.bytes for b in program.buffers if b.tier == 0 and b.lifetime == core.BufferLifetime.Resident)
    assert resident >= weight_bytes(model) + generative.kv_cache_bytes
    bound = {name: b.tensor for b in decode._program.bound for name in b.names}
    caches = [bound[f"key_cache_{layer}"] for layer in range(layers)]
    addresses = [cache.data_ptr() for cache in caches]
    ids, mask = left_padded(PROMPTS[:2])
    generative.generate(ids, mask, max_new_tokens=4)
    assert list(decode.last_peak_bytes.values()) == simulated_peaks(decode)
    # Written in place, every layer's keys and values: a step holds less than the cache's
    # bytes beyond the residents (a copy per call held the whole cache's again).
    assert len(decode._program.in_place) == 2 * layers
    assert decode.last_peak_bytes["ram"] - resident < generative.kv_cache_bytes
    assert [cache.data_ptr() for cache in caches] == addresses and caches[0].count_nonzero() > 0
    generative.close()


def test_on_a_device_with_memory_of_its_own_the_programs_share_one_copy_and_the_cache_never_crosses(apart_device):
    torch.manual_seed(0)
    model = built("llama")
    ids, mask = left_padded(PROMPTS[:2])
    expected = hugging_face(model, ids, mask, max_new_tokens=8)
    generative = tt.compile_for_generation(
        model, max_length=16, batch_size=2, prompt_buckets=[4], devices=[apart_device]
    )
    decode, prefill = generative.programs[1], generative.programs[4]
    out = generative.generate(ids, mask, max_new_tokens=8, eos_token_id=STOP, pad_token_id=0)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    # The device holds the weights and the cache once, for both programs (a copy each held them twice).
    backend, index = decode._plane.devices[apart_device]
    held = weight_bytes(model) + generative.kv_cache_bytes
    assert 0.99 * held < backend.memory(index).allocated < 1.1 * held
    for program in (decode, prefill):
        assert program.in_place_tiers == {apart_device: generative.kv_cache_bytes}
        lowered = program._plane.plan.program
        copies = [i for i in lowered.schedule.instructions if i.kind == core.InstructionKind.Copy]
        moved = sum(lowered.buffers[b].bytes for i in copies for b in i.reads)
        assert moved < generative.kv_cache_bytes // 4, "tokens, mask and logits cross the link; the cache does not"
    assert list(decode.last_peak_bytes.values()) == simulated_peaks(decode)
    assert f"cache in {apart_device} 16.0 KiB" in generative.explain()
    generative.close()


MORE_DECODERS = {
    "mistral": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(**DECODER)),
    "phi3": lambda: transformers.Phi3ForCausalLM(transformers.Phi3Config(**DECODER, pad_token_id=0)),
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(qwen3_moe_config()),
}


@pytest.mark.parametrize("name", ["mistral", "phi3", pytest.param("qwen3_moe", marks=needs_stacked_experts)])
def test_mistral_phi3_and_a_mixture_of_experts_generate_hugging_faces_tokens(name):
    torch.manual_seed(0)
    model = MORE_DECODERS[name]().eval()
    generative = tt.compile_for_generation(model, max_length=16, batch_size=3, prompt_buckets=[4], devices="cpu")
    ids, mask = left_padded(PROMPTS)
    out = generative.generate(ids, mask, max_new_tokens=6, eos_token_id=STOP, pad_token_id=0)
    torch.testing.assert_close(out, hugging_face(model, ids, mask, max_new_tokens=6), rtol=0, atol=0)
    generative.close()


@needs_stacked_experts
def test_a_checkpoint_with_one_expert_per_tensor_is_refused_with_what_to_do_instead(tmp_path):
    torch.manual_seed(0)
    MORE_DECODERS["qwen3_moe"]().save_pretrained(tmp_path)  # transformers writes each expert apart
    with torch.device("meta"):
        meta = MORE_DECODERS["qwen3_moe"]()
    with pytest.raises(tt.CheckpointError, match="one expert per tensor.*from_pretrained"):
        tt.compile_for_generation(meta, max_length=16, checkpoint=str(tmp_path), devices="cpu")


@needs_stacked_experts
@pytest.mark.parametrize("weight_format", [None, "int8"])
def test_a_mixture_of_experts_under_half_its_weights_maps_its_experts_and_reads_those_a_token_uses(weight_format):
    torch.manual_seed(0)
    model = MORE_DECODERS["qwen3_moe"]().eval()
    held = compressed_model(model, weight_format)  # int8: its experts too (compression/int8_experts.py)
    weights = weight_bytes(held)
    config = tt.CompileConfig(ram_budget_bytes=weights // 2, weight_format=weight_format)
    generative = tt.compile_for_generation(
        model, max_length=16, batch_size=1, prompt_buckets=[4], config=config, devices="cpu"
    )
    explained = generative.explain()
    assert "Mapped from disk" in explained and "experts.gate_up_proj" in explained
    ids, mask = left_padded(PROMPTS[:1])
    out = generative.generate(ids, mask, max_new_tokens=6, eos_token_id=STOP, pad_token_id=0)
    torch.testing.assert_close(out, hugging_face(held, ids, mask, max_new_tokens=6), rtol=0, atol=0)
    # A decode step reads none of the experts: the 2 of 4 a token uses come through the mapping.
    experts = sum(p.nbytes for name, p in held.named_parameters() if ".experts." in name)
    assert generative.programs[1].last_report.bytes_read <= weights - generative.shared_weight_bytes - experts
    generative.close()
