"""The text of generated tokens as they come, for streaming: each token's new piece of
text, a character cut in two by a token held back until it is whole, and stop strings:
once one appears, the text ends before it (and a piece that may begin one waits)."""

from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stops: list[str]) -> None:
        self._tokenizer, self._stops = tokenizer, [stop for stop in stops if stop]
        self._ids: list[int] = []
        self._text = ""
        self._sent = 0  # characters of the text given out so far
        self.stopped = False  # a stop string appeared: the text has ended

    def push(self, token: int) -> str:
        """The text that `token` adds and that can be given out now."""
        if self.stopped:
            return ""
        self._ids.append(token)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # the token ends inside a character: wait for the rest
            return ""
        return self._up_to(text, len(text) - self._held_back(text))

    def rest(self) -> str:
        """What is left to give out once the generation ended (a character cut short shown
        as the tokenizer shows it)."""
        if self.stopped:
            return ""
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        return self._up_to(text, len(text))

    def _up_to(self, text: str, end: int) -> str:
        """The text from what was given out up to `end`, or up to a stop string that appeared."""
        self._text = text
        found = [i for i in (text.find(stop, max(0, self._sent - len(stop))) for stop in self._stops) if i >= 0]
        if found:
            self.stopped = True
            end = min(found)
        return self._given(end)

    @property
    def text(self) -> str:
        """Everything given out."""
        return self._text[: self._sent]

    def _given(self, end: int) -> str:
        piece = self._text[self._sent : max(end, self._sent)]
        self._sent = max(end, self._sent)
        return piece

    def _held_back(self, text: str) -> int:
        """The length of the longest end of `text` that begins a stop string."""
        return max((n for stop in self._stops for n in range(1, len(stop)) if text.endswith(stop[:n])), default=0)
