"""`tensortorrent generate ARTIFACT --prompt TEXT | --ids 1,2,3 --max-new-tokens N`: tokens
from a saved generative module, printed as they come (text where the artifact holds a
tokenizer, else token ids)."""

from __future__ import annotations

import argparse
import sys

import torch

from ..config import CompileConfig
from ..errors import InvalidArgumentError
from ..generation.module import GenerativeModule
from ..generation.text_stream import TextStream
from ..load import load_compiled


def add_parser(commands) -> None:
    parser = commands.add_parser("generate", help="generate tokens with a saved generative module")
    parser.add_argument("artifact", help="a directory written by GenerativeModule.save()")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt as text (the artifact must hold a tokenizer)")
    prompt.add_argument("--ids", help="the prompt as token ids joined by commas: 1,2,3")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate at most (default 32)")
    parser.add_argument("--temperature", type=float, default=None, help="sample at this temperature (default: greedy)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    parser.add_argument("--top-p", type=float, default=None, help="sample among the most likely tokens up to p")
    parser.add_argument("--seed", type=int, default=None, help="the sampler's seed")
    parser.add_argument("--ram-budget-bytes", type=int, default=None, help="a RAM budget: the weights stream")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = CompileConfig(ram_budget_bytes=args.ram_budget_bytes) if args.ram_budget_bytes is not None else None
    module = load_compiled(args.artifact, config=config)
    if not isinstance(module, GenerativeModule):
        raise InvalidArgumentError(f"generate: {args.artifact} holds a compiled module, not a generative one")
    try:
        ids = _prompt(args, module)
        printer = _Printer(module.tokenizer if args.prompt is not None else None)
        sample = {"do_sample": True, "temperature": args.temperature} if args.temperature is not None else {}
        if args.top_k is not None or args.top_p is not None:
            sample = {"do_sample": True, **sample, "top_k": args.top_k, "top_p": args.top_p}
        module.generate(ids, max_new_tokens=args.max_new_tokens, seed=args.seed, streamer=printer.tokens, **sample)
        printer.end()
    finally:
        module.close()
    return 0


def _prompt(args: argparse.Namespace, module: GenerativeModule) -> torch.Tensor:
    if args.ids is not None:
        try:
            ids = [int(token) for token in args.ids.split(",")]
        except ValueError:
            raise InvalidArgumentError(
                f"generate: --ids: expected token ids joined by commas, got {args.ids!r}"
            ) from None
        return torch.tensor([ids], dtype=torch.long)
    if module.tokenizer is None:
        raise InvalidArgumentError(
            f"generate: {args.artifact} holds no tokenizer: pass --ids, or save the module with tokenizer="
        )
    return torch.tensor([module.tokenizer(args.prompt)["input_ids"]], dtype=torch.long)


class _Printer:
    """Prints each token as it comes: its text, else its id."""

    def __init__(self, tokenizer) -> None:
        self._text = TextStream(tokenizer, []) if tokenizer is not None else None

    def tokens(self, tokens: torch.Tensor) -> None:
        token = int(tokens[0])
        piece = self._text.push(token) if self._text is not None else f"{token} "
        sys.stdout.write(piece)
        sys.stdout.flush()

    def end(self) -> None:
        print(self._text.rest() if self._text is not None else "", flush=True)
