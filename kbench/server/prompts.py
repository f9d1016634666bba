"""The token ids of a batch: what each prompt pattern is, and what it measures.

``random``      every token drawn uniformly from the vocabulary (SGLang's bench_one_batch_server: random
                ids). No n-gram repeats, so a speculative drafter that looks up n-grams in the prompt (vLLM
                ``ngram``, SGLang's lookahead) rarely proposes an accepted draft: the acceptance path is hardly
                exercised and acc_length is near 1. Measures the server's raw prefill/decode speed.
``repeat:N``    each prompt is its own random N-token pattern repeated to the input length. The model (at
                temperature 0) tends to continue the pattern, so n-gram drafts get accepted: measures the
                speculative path (acc_length > 1) and how much it buys.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from kbench.errors import BadInput


@dataclass(frozen=True)
class PromptPattern:
    kind: str = "random"  # random | repeat
    period: int = 0  # repeat: the pattern's length in tokens

    def __str__(self) -> str:
        return self.kind if self.kind == "random" else f"repeat:{self.period}"

    def ids(self, rng: random.Random, batch_size: int, input_len: int, vocab: int) -> list[list[int]]:
        if self.kind == "random":
            return [[rng.randrange(vocab) for _ in range(input_len)] for _ in range(batch_size)]
        out = []
        for _ in range(batch_size):
            unit = [rng.randrange(vocab) for _ in range(self.period)]
            out.append((unit * (input_len // self.period + 1))[:input_len])
        return out


def parse_prompt_pattern(text: str | PromptPattern) -> PromptPattern:
    if isinstance(text, PromptPattern):
        return text
    s = str(text).strip().lower()
    if s == "random":
        return PromptPattern()
    m = re.fullmatch(r"repeat:(\d+)", s)
    if m and int(m.group(1)) >= 1:
        return PromptPattern("repeat", int(m.group(1)))
    raise BadInput(f"--prompt-pattern {text!r}: expected random or repeat:N (N >= 1 tokens, e.g. repeat:5)")
