"""The token ids of a batch: what each prompt pattern is, and what it measures.

``random``      every token drawn uniformly from the vocabulary (SGLang's bench_one_batch_server: random
                ids). Measures the server's raw prefill/decode speed. The prompt offers no n-gram for a
                prompt-lookup drafter (vLLM ``ngram``) to find, so drafts come only once the output repeats
                itself: the CPU test model's does (15 drafts over 2 x 64 tokens), a real model's rarely.
``repeat:N``    each prompt is its own random N-token pattern repeated to the input length, so the drafter
                finds the continuation in the prompt from the first decode step (28 drafts over the same
                2 x 64 tokens, 96% of draft tokens accepted, acc_length 3.9): measures the speculative path.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from kbench.errors import BadInput
from kbench.values import INT32_MAX


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
    m = re.fullmatch(r"repeat:([0-9]{1,10})", s)  # ASCII digits ('\d' takes '５'), at most a prompt's length
    if m and 1 <= int(m.group(1)) <= INT32_MAX:
        return PromptPattern("repeat", int(m.group(1)))
    raise BadInput(f"--prompt-pattern {text!r}: expected random or repeat:N (N in 1..{INT32_MAX} tokens, e.g. repeat:5)")
