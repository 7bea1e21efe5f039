"""Serving a generative artifact (issue 43): KServe's generate extension and OpenAI's
completions, on a real server on loopback, called with the openai client and a plain
server-sent-events reader; the tokenizer trained here with `tokenizers`."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
import torch
from e2e.test_serve import call, metric, serving
from tiny_tokenizer import trained_tokenizer

import tensortorrent as tt
from tiny_transformers import built

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

PROMPT = "the quick brown fox"
END = 0  # the tokenizer's end token (tiny_tokenizer.END)
MAX_LENGTH, NEW = 32, 10


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    torch.manual_seed(0)
    model = built("llama")
    model.generation_config.eos_token_id = None  # every generation runs its max_tokens
    tokenizer = trained_tokenizer()
    generative = tt.compile_for_generation(
        model, max_length=MAX_LENGTH, batch_size=2, prompt_buckets=[4, 8], devices="cpu"
    )
    directory = generative.save(tmp_path_factory.mktemp("served") / "llama", tokenizer=tokenizer)
    generative.close()
    return model, tokenizer, directory


def greedy(model, tokenizer, text: str, new: int = NEW) -> list[int]:
    """Hugging Face's greedy tokens after `text`, up to the tokenizer's end token (the
    model has none, so the server stops at the tokenizer's): what every greedy request gets."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False, eos_token_id=END
        )
    return out[0, ids.shape[1] :].tolist()


def events(url: str, body: dict) -> list[dict]:
    """A plain server-sent-events reader: each `data:` line's JSON, until the stream ends."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    found = []
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                found.append(json.loads(line[len("data: ") :]))
    return found


def test_kserve_generate_and_its_stream_give_hugging_faces_tokens_and_text(artifact):
    model, tokenizer, directory = artifact
    expected = greedy(model, tokenizer, PROMPT)
    with serving({"llama": tt.load_compiled(directory)}) as (url, _, _):
        status, _, reply = call(f"{url}/v2/models/llama/generate", {"text_input": PROMPT, "max_tokens": NEW})
        assert status == 200, reply
        assert reply["output_ids"] == expected
        assert reply["text_output"] == tokenizer.decode(expected, skip_special_tokens=True)
        streamed = events(f"{url}/v2/models/llama/generate_stream", {"text_input": PROMPT, "max_tokens": NEW})
        assert [token for event in streamed for token in event["output_ids"]] == expected  # one event per token
        assert "".join(event["text_output"] for event in streamed) == reply["text_output"]
        status, _, metadata = call(f"{url}/v2/models/llama")
        assert metadata["generate"] == {"batch_size": 2, "max_length": MAX_LENGTH}
        _, _, server = call(f"{url}/v2")
        assert "generate" in server["extensions"]
        status, _, ids_reply = call(f"{url}/v2/models/llama/generate", {"input_ids": [5, 6, 7], "max_tokens": 3})
        assert status == 200 and 1 <= len(ids_reply["output_ids"]) <= 3
        metrics = call(f"{url}/metrics")[2]
        assert metric(metrics, "tt_time_to_first_token_seconds_count", model="llama") == 3
        assert metric(metrics, "tt_generated_tokens_total", model="llama") == 2 * len(expected) + len(
            ids_reply["output_ids"]
        )


def test_the_openai_client_completes_and_chats_whole_and_streamed(artifact):
    model, tokenizer, directory = artifact
    tokens = greedy(model, tokenizer, PROMPT)
    expected = tokenizer.decode(tokens, skip_special_tokens=True)
    with serving({"llama": tt.load_compiled(directory)}, api_key="secret") as (url, _, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="secret")
        assert [m.id for m in client.models.list()] == ["llama"]
        completion = client.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, temperature=0)
        assert completion.choices[0].text == expected
        assert completion.choices[0].finish_reason == ("stop" if tokens[-1] == END else "length")
        assert completion.usage.completion_tokens == len(tokens)
        assert completion.usage.prompt_tokens == len(tokenizer(PROMPT)["input_ids"])
        pieces = client.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, temperature=0, stream=True)
        assert "".join(chunk.choices[0].text for chunk in pieces) == expected
        messages = [{"role": "user", "content": "hi"}]
        chat = client.chat.completions.create(model="llama", messages=messages, max_tokens=4, temperature=0)
        answer = chat.choices[0].message
        assert answer.role == "assistant" and chat.usage.completion_tokens >= 1
        stream = client.chat.completions.create(
            model="llama", messages=messages, max_tokens=4, temperature=0, stream=True
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == answer.content
        sampled = client.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, seed=3, temperature=0.8)
        again = client.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, seed=3, temperature=0.8)
        assert sampled.choices[0].text == again.choices[0].text  # a seed gives the same draws
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong").models.list()


def test_a_stop_string_ends_the_text_before_it(artifact):
    model, tokenizer, directory = artifact
    whole = tokenizer.decode(greedy(model, tokenizer, PROMPT), skip_special_tokens=True)
    stop = whole[len(whole) // 2 : len(whole) // 2 + 2]
    with serving({"llama": tt.load_compiled(directory)}) as (url, _, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        cut = client.completions.create(model="llama", prompt=PROMPT, max_tokens=NEW, temperature=0, stop=[stop])
        assert cut.choices[0].text == whole[: whole.find(stop)]
        assert cut.choices[0].finish_reason == "stop"


def test_concurrent_requests_share_the_batch_and_each_gets_its_own_tokens(artifact):
    model, tokenizer, directory = artifact
    prompts = ["the quick brown fox", "hello world", "a model larger than memory", "tokens stream"]
    expected = {text: greedy(model, tokenizer, text) for text in prompts}
    loaded = tt.load_compiled(directory)
    with serving({"llama": loaded}) as (url, _, _):
        replies = {}

        def ask(text: str) -> None:
            replies[text] = call(f"{url}/v2/models/llama/generate", {"text_input": text, "max_tokens": NEW})

        threads = [threading.Thread(target=ask, args=(text,)) for text in prompts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for text in prompts:
            status, _, reply = replies[text]
            assert status == 200 and reply["output_ids"] == expected[text], text
        assert loaded.rows_in_use == 0  # every request left and freed its rows


def test_bad_requests_are_named_and_a_full_queue_refuses_with_503(artifact):
    _, _, directory = artifact
    with serving({"llama": tt.load_compiled(directory)}, max_queue_size=1) as (url, _, _):
        cases = [
            ({"max_tokens": 3}, '"text_input" (a string) or "input_ids"'),
            ({"text_input": "hi", "max_tokens": 0}, '"max_tokens": expected an integer >= 1, got 0'),
            ({"text_input": "hello world", "max_tokens": MAX_LENGTH}, "positions model 'llama' was compiled for"),
            ({"text_input": "hi", "temperature": -1}, '"temperature": expected a number >= 0, got -1'),
        ]
        for body, message in cases:
            status, _, reply = call(f"{url}/v2/models/llama/generate", body)
            assert status == 400 and message in reply["error"], (body, reply)
        status, _, reply = call(f"{url}/v2/models/nope/generate", {"text_input": "hi"})
        assert status == 404
        status, _, reply = call(f"{url}/v2/models/llama/infer", {"inputs": []})
        assert status == 400 and "generates text" in reply["error"]
        status, _, reply = call(f"{url}/v1/completions", {"model": "llama", "prompt": "hi", "n": 2})
        assert status == 400 and '"n"' in reply["error"]
        long = {"input_ids": [5, 6, 7, 8], "max_tokens": MAX_LENGTH - 4}
        request = urllib.request.Request(f"{url}/v2/models/llama/generate_stream", json.dumps(long).encode())
        with urllib.request.urlopen(request, timeout=60) as stream:
            stream.readline()  # its first event: it is generating
            status, headers, reply = call(f"{url}/v2/models/llama/generate", {"text_input": "hi", "max_tokens": 2})
            assert status == 503 and headers["Retry-After"] == "1", reply
            stream.read()
