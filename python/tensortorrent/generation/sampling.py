"""How the next token is chosen from a step's logits: as Hugging Face's generate chooses it.

Greedy takes the most likely token. Sampling scales the logits by the temperature, keeps
the top_k most likely and then the smallest set whose probability reaches top_p, and
draws from what is left; a repetition penalty first makes every token seen so far less
likely (the padding of a left-padded prompt included, as in Hugging Face's). The
processors apply in Hugging Face's order and draw with torch.multinomial from the
generator given, so a seed gives the tokens Hugging Face gives after
torch.manual_seed with that seed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class Sampling:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None  # None (or 0): every token stays a candidate
    top_p: float | None = None  # None (or 1.0): no nucleus cut
    repetition_penalty: float | None = None  # None (or 1.0): no penalty

    def __post_init__(self) -> None:
        if not isinstance(self.do_sample, bool):
            raise InvalidArgumentError(f"generate: do_sample: expected a bool, got {self.do_sample!r}")
        _check_positive("temperature", self.temperature)
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0
        ):
            raise InvalidArgumentError(f"generate: top_k: expected an int >= 0 or None, got {self.top_k!r}")
        if self.top_p is not None:
            _check_positive("top_p", self.top_p)
            if self.top_p > 1:
                raise InvalidArgumentError(f"generate: top_p: expected a float in (0, 1], got {self.top_p!r}")
        if self.repetition_penalty is not None:
            _check_positive("repetition_penalty", self.repetition_penalty)

    def next_tokens(self, logits: torch.Tensor, seen: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Each row's next token from its logits (batch x vocabulary); `seen` are the ids so far."""
        scores = logits.float()
        if self.repetition_penalty not in (None, 1.0):
            scores = _penalize_repeats(scores, seen, self.repetition_penalty)
        if not self.do_sample:
            return scores.argmax(dim=-1)
        if self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k:
            scores = _keep_top_k(scores, self.top_k)
        if self.top_p is not None and self.top_p < 1.0:
            scores = _keep_top_p(scores, self.top_p)
        probabilities = torch.softmax(scores, dim=-1)
        return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(1)


def _penalize_repeats(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    picked = torch.gather(scores, 1, seen)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return scores.scatter(1, seen, picked)


def _keep_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, scores.shape[-1])
    threshold = torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(scores < threshold, -math.inf)


def _keep_top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    ascending, indices = torch.sort(scores, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    dropped = cumulative <= (1 - top_p)
    dropped[..., -1:] = False  # the most likely token always stays
    return scores.masked_fill(dropped.scatter(1, indices, dropped), -math.inf)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"generate: {name}: expected a number > 0, got {value!r}")
