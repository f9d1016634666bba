"""The speculative-decoding configuration a workload asks an engine for (one per server): the q_len every batch of
it verifies and its draft tree, as kbench.recommend.flags.SpecConfig; a workload that needs two is refused, since
no single set of flags reproduces it."""
from __future__ import annotations

from kbench.errors import BadInput


def spec_of(workload, trees: list[str]):
    """The workload's SpecConfig: its one q_len (the longest draft of a ragged batch) and its one tree."""
    from kbench.recommend.flags import SpecConfig

    q_lens = sorted({b.q_len for b in workload.batches})
    kinds = sorted(set(trees)) or ["chain"]
    if len(q_lens) > 1:
        raise BadInput(f"{workload.source}: q_len {', '.join(map(str, q_lens))}: a server runs one speculative "
                       "config (one --speculative-num-draft-tokens), so one set of flags cannot reproduce these; "
                       "price each q_len on its own")
    if len(kinds) > 1:
        raise BadInput(f"{workload.source}: trees {', '.join(kinds)}: a server runs one draft tree shape; price each "
                       "on its own")
    q, tree = q_lens[0], kinds[0]
    return SpecConfig.chain(q) if tree == "chain" else SpecConfig.from_tree(tree, q)
