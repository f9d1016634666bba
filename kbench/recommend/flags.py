"""The engine command line that reproduces what `kbench recommend` priced.

A setting's `flags` (engines.toml) pick only the attention backends. Left to itself the engine then chooses the
rest of what was priced, and not as kbench measured it:
  - SGLang 0.5.23 picks (draft steps, topk, draft tokens) = (5, 4, 8) for a Llama model when
    --speculative-num-steps is not given (python/sglang/srt/arg_groups/speculative_hook.py:1159-1174, 1439-1440):
    trtllm_mha then refuses to start (1176-1180) and flashinfer/fa3 verify an 8-token tree, not the priced chain;
    its page size is 1 unless --page-size is given (arg_groups/overrides.py:1340-1363);
  - vLLM 0.34.0 speculates only with --speculative-config, and its block size defaults to 64
    (vllm/config/cache.py:185).
So the command spells out all of it: the speculative configuration for the priced q_len (and tree), the page
size, and whether the engine overlaps its host work with the GPU.

    spec = SpecConfig.chain(4)                                   # 3 draft steps, verify 4 tokens per request
    argv = server_flags("sglang", "--attention-backend trtllm_mha", spec, page_size=64)
    print(command_line("sglang", argv, model="meta-llama/Llama-3.1-8B-Instruct"))

Engine facts (read in the sglang 0.5.23 wheel, python/sglang/srt/..., and the vllm 0.34.0 wheel, commit
g62d4bc3c7; the tests parse the command with vLLM's and SGLang's own argument parsers):
  SGLang  with topk 1 the draft tokens are forced to steps + 1 (speculative_hook.py:1254-1265); trtllm_mha in the
          prefill or decode slot refuses topk > 1 (speculative_hook.py:1176-1180, slots from
          model_override_base.py:138-152); in the draft slot it is not checked at start, but the backend
          implements topk 1 only (layers/attention/trtllm_mha_backend.py:267-269), so kbench refuses it too.
          trtllm_mha in any slot (draft included) forces the page size to 64 unless it is 16, 32, 64 or 128
          (overrides.py:1174-1187); topk > 1 with a page above 1 needs flashinfer, fa3 or triton
          (speculative_hook.py:1267-1282); a tree of n tokens takes the n - 1 best of K + (S - 1) K^2 draft
          candidates (speculative/eagle_utils.py:100-110). The overlap scheduler is on unless
          --disable-overlap-schedule (arg_groups/fields/schedule.py:193-199). No upper bound on
          --speculative-num-draft-tokens in the arguments (fields/spec.py:58-69).
  vLLM    num_speculative_tokens > 0, no upper bound (config/speculative.py:455, 1653-1664); the speculative
          config forbids unknown keys (config/utils.py:71-72) and has no tree field: vLLM 0.34 drafts chains only
          (no speculative_token_tree, no TREE_ATTN backend in the wheel). Kernel block sizes: FLASHINFER 16, 32,
          64 (128 and up only on SM100 with GQA; v1/attention/backends/flashinfer.py:587-606), FLASH_ATTN and
          TRITON_ATTN multiples of 16 (flash_attn.py:357-367, triton_attn.py:339-340). Async scheduling (the
          overlap of the next step's scheduling with the GPU) is on by default and silently off where the
          configuration does not support it; --async-scheduling makes that an error, --no-async-scheduling turns
          it off (config/vllm.py:1598-1637, engine/arg_utils.py:1842).
The upper bound kbench applies to q_len is its own: the shapes it measures (kbench.cases.axes.MAX_Q_LEN).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from kbench import shell
from kbench.cases import axes
from kbench.cases import trees
from kbench.errors import BadInput
from kbench.files import JSONProblem, loads

ENGINES = ("sglang", "vllm")
OVERLAPS = ("sum", "max")  # sum: host and GPU work add up (the engine's overlap off); max: overlapped (on)
MIN_Q_LEN = 2  # q_len 1 verifies no draft token
MAX_Q_LEN = axes.MAX_Q_LEN  # kbench's bound (the shapes it measures); neither engine has a lower one
ALGORITHMS = {"eagle": ("EAGLE", "eagle"), "eagle3": ("EAGLE3", "eagle3"),  # name -> (SGLang, vLLM)
              "mtp": ("NEXTN", "mtp")}  # DeepSeek-style MTP: the draft is the target's own MTP layer
# SGLang's MLA backends that run no draft tree (topk > 1): flashmla_backend.py:602-611,
# flashinfer_mla_backend.py:1190-1199; trtllm_mla and cutedsl_mla at a page above 1 (speculative_hook.py:1268-1282)
SGLANG_MLA_CHAIN_ONLY = ("flashmla", "flashinfer", "trtllm_mla", "cutedsl_mla")

# SGLang: the flags that carry an attention backend (one slot each)
SGLANG_SLOTS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
                "--speculative-draft-attention-backend")
SGLANG_TRTLLM_PAGES = (16, 32, 64, 128)  # overrides.py:1174-1187: anything else becomes 64
SGLANG_PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")  # speculative_hook.py:1271
VLLM_FLASHINFER_PAGES = (16, 32, 64)  # flashinfer.py:587-606 (128+ only on SM100 with GQA)
VLLM_PAGE_MULTIPLE = 16  # FLASH_ATTN, TRITON_ATTN: MultipleOf(16)

# flags the command sets itself: a setting that already gives one would be overridden or contradicted
_SGLANG_OWN = ("--speculative-algorithm", "--speculative-eagle-topk", "--speculative-num-steps",
               "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--speculative-draft-model",
               "--page-size", "--disable-overlap-schedule")
_VLLM_OWN = ("--speculative-config", "-sc", "--block-size", "--async-scheduling", "--no-async-scheduling")


@dataclass(frozen=True)
class SpecConfig:
    """The speculative configuration a price assumed, as the engines count it.

    q_len: query tokens per request in target verify, the root (the last verified token) included: SGLang's
    --speculative-num-draft-tokens, vLLM's num_speculative_tokens + 1. topk 1 is a chain of q_len - 1 draft steps;
    topk K > 1 is an EAGLE-2 tree (SGLang only) of `steps` draft steps, each keeping the K best nodes."""

    q_len: int
    topk: int = 1
    steps: int | None = None  # None: a chain's q_len - 1, a tree's steps as kbench's generator builds it

    def __post_init__(self):
        for name in ("q_len", "topk"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise BadInput(f"speculative config: {name} {v!r} is not a positive integer")
        if self.steps is None:
            object.__setattr__(self, "steps", self.q_len - 1 if self.topk == 1
                               else trees.draft_steps(self.q_len, self.topk))
        elif not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 0:
            raise BadInput(f"speculative config: steps {self.steps!r} is not a non-negative integer")

    @classmethod
    def chain(cls, q_len: int) -> SpecConfig:
        """An EAGLE chain verifying q_len tokens per request: q_len - 1 draft steps, topk 1."""
        return cls(q_len=q_len, topk=1)

    @classmethod
    def from_tree(cls, tree: str, q_len: int) -> SpecConfig:
        """The config of kbench's `tree` axis value (kbench.cases.trees): `chain` (or topk:1) is a chain;
        `topk:K` is the tree kbench's EAGLE-like generator builds, with SGLang's --speculative-eagle-topk K,
        --speculative-num-steps ceil((q_len - 1) / K) and --speculative-num-draft-tokens q_len. A `file:` tree
        has no engine flags: SGLang and vLLM build their own trees from the draft model's scores."""
        try:
            spec = trees.parse_tree(tree)
        except ValueError as e:
            raise BadInput(f"tree {tree!r}: {e}") from None
        if spec.kind == "file":
            raise BadInput(f"tree {spec.text}: a tree read from a file has no engine flags (the engines build "
                           "their trees from the draft model's scores); price a chain or topk:K")
        if spec.kind == "chain":
            return cls.chain(q_len)
        return cls(q_len=q_len, topk=int(spec.arg))

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def num_draft_tokens(self) -> int:
        """SGLang's --speculative-num-draft-tokens: the verified tokens, root included."""
        return self.q_len

    @property
    def num_speculative_tokens(self) -> int:
        """vLLM's num_speculative_tokens: the draft tokens of the chain, the root not counted."""
        return self.q_len - 1


def _engine(engine: str) -> str:
    e = str(engine).strip().lower()
    if e not in ENGINES:
        raise BadInput(f"engine {engine!r}: unknown (use {' or '.join(ENGINES)})")
    return e


def _split(setting_flags: str) -> list[str]:
    try:
        return shlex.split(setting_flags or "")
    except ValueError as e:
        raise BadInput(f"setting flags {setting_flags!r}: {e}") from None


def _values(argv: list[str], names: tuple[str, ...]) -> dict[str, str]:
    """{flag: value} for the flags named, given as `--flag value` or `--flag=value` (the last one wins, as in
    argparse)."""
    out = {}
    for i, a in enumerate(argv):
        name, eq, val = a.partition("=")
        if name in names:
            if eq:
                out[name] = val
            elif i + 1 < len(argv):
                out[name] = argv[i + 1]
    return out


def sglang_backends(setting_flags: str) -> dict[str, str]:
    """The attention backend of each slot the setting's flags fill: {'--attention-backend': 'trtllm_mha', ...}."""
    return _values(_split(setting_flags), SGLANG_SLOTS)


def vllm_backend(setting_flags: str) -> tuple[str | None, bool | None]:
    """(backend, use_trtllm_attention) the setting's flags give vLLM: from --attention-backend or the JSON of
    -ac/--attention-config; None where the flags leave it to vLLM."""
    argv = _split(setting_flags)
    v = _values(argv, ("--attention-backend", "-ac", "--attention-config"))
    backend, trtllm = v.get("--attention-backend"), None
    raw = v.get("--attention-config", v.get("-ac"))
    if raw is not None:
        try:
            cfg = loads(raw)
        except JSONProblem:
            raise BadInput(f"setting flags {setting_flags!r}: the attention config is not JSON") from None
        if not isinstance(cfg, dict):
            raise BadInput(f"setting flags {setting_flags!r}: the attention config is not a JSON object")
        backend = cfg.get("backend", backend)
        trtllm = cfg.get("use_trtllm_attention")
    return (str(backend).upper() if backend is not None else None), trtllm


def check_spec(engine: str, setting_id: str, setting_flags: str, spec: SpecConfig) -> None:
    """BadInput (one line) for a speculative config the engine refuses, or one no run of the engine makes:
    q_len < 2 (no draft token), q_len beyond what kbench measures, a chain whose steps are not q_len - 1 (SGLang
    would change the draft tokens), a tree whose steps cannot fill it, trtllm_mha in any slot with a tree
    (SGLang), any tree on vLLM (0.34 drafts chains only)."""
    engine = _engine(engine)
    where = f"{engine} setting {setting_id!r}"
    if spec.q_len < MIN_Q_LEN:
        raise BadInput(f"{where}: q_len {spec.q_len} verifies no draft token (speculative decoding needs "
                       f"q_len >= {MIN_Q_LEN}: one draft step or more)")
    if spec.q_len > MAX_Q_LEN:
        raise BadInput(f"{where}: q_len {spec.q_len} is beyond the shapes kbench measures (at most {MAX_Q_LEN})")
    if spec.is_chain:
        if spec.steps != spec.q_len - 1:
            raise BadInput(f"{where}: a chain of q_len {spec.q_len} has {spec.q_len - 1} draft steps, not "
                           f"{spec.steps} (SGLang sets the draft tokens to steps + 1 when topk is 1)")
    else:
        if engine == "vllm":
            raise BadInput(f"{where}: vLLM drafts chains only (its speculative config has no tree); "
                           f"topk {spec.topk} is an SGLang tree")
        if spec.steps < 1 or spec.q_len - 1 > spec.topk + (spec.steps - 1) * spec.topk ** 2:
            raise BadInput(f"{where}: {spec.steps} draft steps of topk {spec.topk} give "
                           f"{spec.topk + max(spec.steps - 1, 0) * spec.topk ** 2 if spec.steps else 0} candidates, "
                           f"fewer than the {spec.q_len - 1} draft tokens of a q_len {spec.q_len} tree")
        slots = sglang_backends(setting_flags)
        hit = [s for s, b in slots.items() if b == "trtllm_mha"]
        if hit:
            raise BadInput(f"{where}: trtllm_mha ({hit[0]}) supports topk 1 only; SGLang refuses topk "
                           f"{spec.topk} (use a chain or a setting without trtllm_mha)")
        mla = [b for b in slots.values() if b in SGLANG_MLA_CHAIN_ONLY]
        if setting_id.startswith("mla:") and mla:
            raise BadInput(f"{where}: SGLang's {mla[0]} MLA backend drafts chains only (topk 1); only fa3 and "
                           f"triton run a topk {spec.topk} tree for an MLA model")


def check_page_size(engine: str, setting_flags: str, spec: SpecConfig, page_size: int) -> None:
    """BadInput for a page size the engine would not run with this setting (it would change it, or refuse)."""
    engine = _engine(engine)
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise BadInput(f"page size {page_size!r} is not a positive integer")
    if engine == "sglang":
        slots = sglang_backends(setting_flags)
        if "trtllm_mha" in slots.values() and page_size not in SGLANG_TRTLLM_PAGES:
            raise BadInput(f"page size {page_size}: SGLang runs trtllm_mha with a page of "
                           f"{', '.join(map(str, SGLANG_TRTLLM_PAGES))} only (it would use 64)")
        if not spec.is_chain and page_size > 1:
            base = slots.get("--attention-backend")
            if base is not None and base not in SGLANG_PAGE_TREE_BACKENDS:  # none given: the engine resolves one
                raise BadInput(f"page size {page_size}: SGLang runs a topk {spec.topk} tree at a page above 1 on "
                               f"{', '.join(SGLANG_PAGE_TREE_BACKENDS)} only (--attention-backend is "
                               f"{base or 'not given'})")
        return
    backend, _ = vllm_backend(setting_flags)
    if backend == "FLASHINFER":
        if page_size not in VLLM_FLASHINFER_PAGES:
            raise BadInput(f"block size {page_size}: vLLM's FLASHINFER kernels take "
                           f"{', '.join(map(str, VLLM_FLASHINFER_PAGES))} (128 and up only on SM100 with GQA)")
    elif page_size % VLLM_PAGE_MULTIPLE:
        raise BadInput(f"block size {page_size}: vLLM's {backend or 'default'} backend takes a multiple of "
                       f"{VLLM_PAGE_MULTIPLE}")


def server_flags(engine: str, setting_flags: str, spec: SpecConfig, page_size: int, *, overlap: str | None = None,
                 draft_model: str = "DRAFT_MODEL_PATH", algorithm: str = "eagle") -> list[str]:
    """The engine flags (an argv list) that reproduce the priced configuration.

    SGLang: the setting's backend flags, --speculative-algorithm EAGLE, --speculative-eagle-topk K,
    --speculative-num-steps S, --speculative-num-draft-tokens q_len, --speculative-draft-model-path DRAFT,
    --page-size P; vLLM: --speculative-config {"method": "eagle", "model": DRAFT, "num_speculative_tokens":
    q_len - 1}, --block-size P, then the setting's backend flags. All three speculative numbers are given to SGLang
    because it fills in its own (5, 4, 8) when --speculative-num-steps is missing.

    overlap: how the price combined the host's work with the GPU's. 'sum' (they add up) turns the engine's
    overlap off: SGLang --disable-overlap-schedule, vLLM --no-async-scheduling. 'max' (overlapped) keeps it on:
    SGLang's overlap scheduler is its default (there is no flag to force it); vLLM gets --async-scheduling, which
    makes a configuration that cannot run it an error instead of silently synchronous. None: nothing said.
    algorithm: eagle or eagle3 (the draft head's kind; the attention shapes are the same), or mtp for a
    DeepSeek-style model whose own MTP layer drafts (SGLang NEXTN, an alias of EAGLE whose draft path defaults to
    the target, speculative_hook.py:109-116, 1120-1156; vLLM method mtp, config/speculative.py:1375-1379)."""
    engine = _engine(engine)
    check_spec(engine, "(given)", setting_flags, spec)
    check_page_size(engine, setting_flags, spec, page_size)
    if overlap is not None and overlap not in OVERLAPS:
        raise BadInput(f"overlap {overlap!r}: use {' or '.join(OVERLAPS)}")
    algo = ALGORITHMS.get(str(algorithm).strip().lower())
    if algo is None:
        raise BadInput(f"algorithm {algorithm!r}: use {' or '.join(ALGORITHMS)}")
    _check_path("draft model", draft_model)
    setting = _split(setting_flags)
    own = _SGLANG_OWN if engine == "sglang" else _VLLM_OWN
    clash = [a for a in setting if a.partition("=")[0] in own]
    if clash:
        raise BadInput(f"setting flags {setting_flags!r}: {clash[0]} is set by the priced configuration itself")
    mtp = algo[1] == "mtp"  # the target's own MTP layer drafts: no draft model to name
    if engine == "sglang":
        argv = [*setting, "--speculative-algorithm", algo[0], "--speculative-eagle-topk", str(spec.topk),
                "--speculative-num-steps", str(spec.steps), "--speculative-num-draft-tokens",
                str(spec.num_draft_tokens), *([] if mtp else _option("--speculative-draft-model-path", draft_model)),
                "--page-size", str(page_size)]
        if overlap == "sum":
            argv.append("--disable-overlap-schedule")
        return argv
    cfg = {"method": algo[1], **({} if mtp else {"model": draft_model}),
           "num_speculative_tokens": spec.num_speculative_tokens}
    argv = ["--speculative-config", json.dumps(cfg), "--block-size", str(page_size), *setting]
    if overlap == "sum":
        argv.append("--no-async-scheduling")
    elif overlap == "max":
        argv.append("--async-scheduling")
    return argv


def command_line(engine: str, argv: list[str], model: str = "MODEL_PATH") -> str:
    """One shell line to paste: `python -m sglang.launch_server --model-path MODEL ...` or `vllm serve MODEL
    ...`, every argument quoted for a POSIX shell (kbench.shell.command_line). A model path that starts with `-`
    is given as `--model-path=-x` (SGLang) or `--model=-x` (vLLM, whose positional model it would otherwise be
    read as an option), so the engine's parser cannot take it for one of its flags."""
    engine = _engine(engine)
    _check_path("model", model)
    if engine == "sglang":
        head = ["python", "-m", "sglang.launch_server", *_option("--model-path", model)]
    else:
        head = ["vllm", "serve", *(["--model=" + model] if model.startswith("-") else [model])]
    return shell.command_line([*head, *map(str, argv)])


def _check_path(what: str, value) -> None:
    """BadInput for a model or draft path no engine could be given: not a string, blank, or holding a NUL byte
    (no argument of a command can hold one: it would end there)."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{what} {value!r}: give the {what}'s path or name")
    if "\0" in value:
        raise BadInput(f"{what} {shell.quote(value.replace(chr(0), '<NUL>'))}: holds a NUL byte, which no command "
                       f"argument can hold")


def _option(flag: str, value: str) -> list[str]:
    """`flag value`, or `flag=value` where the value starts with `-` (an engine's parser would read it as a flag)."""
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def spec_of(workload, trees: list[str]):
    """The workload's SpecConfig: its one q_len (the longest draft of a ragged batch) and its one tree."""
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
