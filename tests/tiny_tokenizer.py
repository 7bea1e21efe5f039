"""A byte-level BPE tokenizer trained here with the `tokenizers` library (nothing is
downloaded), small enough for the tiny models' vocabulary, as a transformers tokenizer."""

from __future__ import annotations

from tiny_transformers import VOCAB

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a model larger than memory still runs",
    "tokens stream out one at a time",
    "hello world, hello tensors",
    "user: hi\nassistant: THE END 0123456789 ?!.",
]
END = "<|end|>"


def trained_tokenizer():
    """A PreTrainedTokenizerFast of at most VOCAB tokens, END its end token (id 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # The alphabet is the corpus's own characters (ByteLevel.alphabet() is a set: its order, and
    # so the ids, would change from run to run).
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[END])
    tokenizer.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=END, pad_token=END)
