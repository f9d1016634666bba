"""`kbench prebuild` on the CPU: the plan (which modules a grid needs, each once, filtered like the sweep), the
build loop, the archive's layout and version stamp, loading it, bad input and outputs that cannot be written.

FlashInfer names its modules from the target architecture read when it is imported, so the tests that ask the
real FlashInfer 0.7.4 run kbench in a subprocess with --arch (this process may have imported it for the CPU)."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import shared_library
from click.testing import CliRunner

from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario
from kbench.cli.main import cli
from kbench.device import DeviceInfo
from kbench.engine import jit, prebuild
from kbench.engine.jit_cache import cache_info, module_state
from kbench.errors import BadInput
from kbench.kernels.base import Kernel

H200 = DeviceInfo(cuda=True, name="H200", sm=90)


class FakeSpec:
    """What kbench reads of a FlashInfer JitSpec: its name, where its library goes, whether it is AOT, build()."""

    def __init__(self, name, root: Path, aot=False, fail=None):
        self.name, self.aot, self.fail, self.builds = name, aot, fail, 0
        self.jit_library_path = root / "cached_ops" / name / f"{name}.so"
        self.aot_path = root / "aot" / name / f"{name}.so"

    extra_ldflags = None

    @property
    def is_aot(self):
        return self.aot

    def get_compile_commands(self):  # no sources: nothing for the toolchain check to find missing
        return []

    def build(self, need_lock=False):
        self.builds += 1
        if self.fail:
            raise RuntimeError(f"Ninja build failed. Ninja output:\n[1/3] nvcc ...\nFAILED: x.o\n{self.fail}\nninja: build stopped")
        self.jit_library_path.parent.mkdir(parents=True, exist_ok=True)
        self.jit_library_path.write_bytes(shared_library(self.name.encode()))


class FakeKernel(Kernel):
    """A kernel with one module per (q_len) and one shared by every case; refuses q_len 3 and SM100."""

    def __init__(self, name, root, shared="shared", path="decode", key=True):
        self.name, self.path, self.root, self.shared, self.key = name, path, root, shared, key
        self.asked = []

    def supports(self, device, case):
        if device.sm == 100:
            return "needs SM90"
        return "q 3 refused" if case.q_len == 3 else None

    def jit_key(self, case):
        return (case.q_len,) if self.key else None

    def jit_specs(self, device, case):
        self.asked.append(case.q_len)
        return [FakeSpec(f"{self.name}_q{case.q_len}", self.root), FakeSpec(self.shared, self.root)]


def grid(**kw):
    base = dict(name="t", heads=MODELS["llama3-8b"], batch_size=[1, 4], q_len=[1, 2, 3], kv_len=[64, 128], page_size=[16])
    base.update(kw)
    return Scenario(**base).validate().cases()


# --- the plan ----------------------------------------------------------------------------------------------
def test_plan_names_each_module_once_filtered_like_the_sweep(tmp_path):
    a, b = FakeKernel("a", tmp_path), FakeKernel("b", tmp_path)
    ref = FakeKernel("ref", tmp_path, path="reference")
    nokey = FakeKernel("nokey", tmp_path, key=False)
    cases = grid()
    mods = prebuild.plan([a, b, ref, nokey], cases, H200)
    names = [m.name for m in mods]
    assert len(names) == len(set(names))  # each once
    assert set(names) == {"a_q1", "a_q2", "b_q1", "b_q2", "shared"}  # q 3 refused, no reference, no jit_key
    shared = next(m for m in mods if m.name == "shared")
    assert shared.kernels == ["a", "b"]  # one module, both kernels that load it
    # each (kernel, jit_key) asked once, though 4 cases (bs x kv) share each q
    assert sorted(a.asked) == [1, 2] and ref.asked == [] and nokey.asked == []
    # the sweep's own compile step plans the same (kernel, jit_key) pairs
    assert set(jit.compile_targets([a, b, ref, nokey], cases, H200)) == {("a", (1,)), ("a", (2,)), ("b", (1,)), ("b", (2,))}
    assert prebuild.plan([a, b], cases, DeviceInfo(cuda=True, name="B200", sm=100)) == []


def test_plan_skips_kv_dtypes_a_kernel_does_not_take(tmp_path):
    a = FakeKernel("a", tmp_path)
    a.kv_dtypes = ("bf16",)
    assert prebuild.plan([a], grid(kv_dtype=["fp16"]), H200) == []


def test_module_state(tmp_path):
    s = FakeSpec("m", tmp_path)
    assert module_state(s) == "missing"
    s.build()
    assert module_state(s) == "cached"
    assert module_state(FakeSpec("n", tmp_path, aot=True)) == "aot"


# --- building ----------------------------------------------------------------------------------------------
def test_build_builds_only_what_is_missing_and_says_why_one_failed(tmp_path):
    there, new, bad = FakeSpec("there", tmp_path), FakeSpec("new", tmp_path), FakeSpec(
        "bad", tmp_path, fail="x.cu(3): error: identifier \"cublasLtHandle_t\" is undefined")
    there.build()
    seen = []
    out = prebuild.build([prebuild.Module(s.name, s) for s in (there, new, bad)], parallel=2, on_done=seen.append)
    by = {o.module: o for o in out}
    assert by["there"].status == "cached" and there.builds == 1  # not rebuilt
    assert by["new"].status == "built" and module_state(new) == "cached"
    assert by["bad"].status == "failed" and "cublasLtHandle_t" in by["bad"].reason and "ninja" not in by["bad"].reason
    assert [o.module for o in seen] == [o.module for o in out]


def test_compile_all_starts_no_process_for_prebuilt_jobs(monkeypatch):
    jobs = [jit.CompileJob("a", c) for c in grid()[:3]]
    monkeypatch.setattr(jit, "prebuilt", lambda job, device: job is jobs[0])
    pooled, loaded, done = [], [], []
    monkeypatch.setattr(jit, "_run_pool", lambda js, *a: pooled.append(list(js)) or {})
    monkeypatch.setattr(jit, "run_job", lambda k, c, i=0: loaded.append(c) or (0.1, None))
    jit.compile_all(jobs, workers=4, on_done=lambda j, s, e: done.append(j), in_process=False, device=H200)
    assert pooled == [jobs[1:]] and loaded == [] and done == [jobs[0]]
    pooled.clear()
    jit.compile_all(jobs, workers=4, in_process=True, device=H200)
    assert pooled == [jobs[1:]] and loaded == [j.case for j in jobs]  # in-process: all loaded here


@pytest.mark.skipif(not __import__("shutil").which("cc"), reason="needs a C compiler for the stub")
def test_toolchain_stubs_libcuda_and_adds_include_folders(tmp_path, monkeypatch):
    cuda = tmp_path / "cuda"  # a toolkit without lib64/stubs and without cuBLAS headers, no driver
    (cuda / "include").mkdir(parents=True)
    inc = tmp_path / "inc"
    inc.mkdir()
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("LIBRARY_PATH", "")
    monkeypatch.setenv("CPATH", "")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "")
    monkeypatch.setattr(prebuild, "_has_libcuda", lambda c: False)  # as on a host without a driver
    notes = prebuild.toolchain([str(inc)])
    stub = Path(os.environ["LIBRARY_PATH"].split(os.pathsep)[0]) / "libcuda.so"
    out = subprocess.run(["readelf", "-d", str(stub)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" in out  # the soname the driver's library has
    assert f"-I{inc}" in os.environ["NVCC_APPEND_FLAGS"] and os.environ["CPATH"] == str(inc)
    assert any("stub" in n for n in notes)


class CompiledSpec:
    """A JitSpec as kbench.engine.headers reads it: its compile commands and link flags."""

    def __init__(self, name, sources, dirs, ldflags=None):
        self.name, self.sources, self.dirs, self.extra_ldflags = name, sources, dirs, ldflags

    def get_compile_commands(self):
        flags = " ".join(f"-isystem {d}" for d in self.dirs)
        return [{"directory": "/", "file": str(s), "command": f"nvcc -c {s} {flags} -O3 -o x.o"} for s in self.sources]


def test_headers_follow_includes_and_name_only_missing_library_headers(tmp_path, monkeypatch):
    from kbench.engine import headers

    src, inc, extra, libs = (tmp_path / d for d in ("src", "inc", "extra", "libs"))
    for d in (src, inc / "sub", extra, libs):
        d.mkdir(parents=True)
    (src / "a.cu").write_text('#include "local.h"\n#include <sub/deep.h>\n')
    (src / "local.h").write_text("#include <vector>\n#if defined(_WIN32)\n#include <windows.h>\n#endif\n")
    (inc / "sub" / "deep.h").write_text('  #  include <cublasLt.h>\n#include "../more.h"\n')
    (inc / "more.h").write_text("#include <curand_kernel.h>\n")
    spec = CompiledSpec("m", [src / "a.cu"], [inc], ["-lcuda -lcublas"])
    monkeypatch.setenv("LIBRARY_PATH", "")
    monkeypatch.setattr(headers, "SYSTEM_LIB_DIRS", ())
    cuda = tmp_path / "cuda"
    (cuda / "lib64" / "stubs").mkdir(parents=True)
    (cuda / "lib64" / "stubs" / "libcuda.so").write_text("")
    n = headers.module_needs(spec, [], cuda)
    # found through a quoted include, an -isystem folder and a relative quoted one; <vector>, <windows.h> not judged
    assert n.headers == {"cublasLt.h": "cuBLAS", "curand_kernel.h": "cuRAND"} and n.libraries == ["cublas"]
    (extra / "cublasLt.h").write_text("")
    (extra / "curand_kernel.h").write_text("")
    (libs / "libcublas.so").write_text("")
    monkeypatch.setenv("LIBRARY_PATH", str(libs))
    n = headers.module_needs(spec, [extra], cuda)
    assert n.headers == {} and n.libraries == []


def test_check_toolchain_refuses_in_one_line_naming_kernels_and_where_to_get_them(tmp_path, monkeypatch):
    from kbench.engine import headers

    (tmp_path / "a.cu").write_text("#include <cublas_v2.h>\n#include <cublasLt.h>\n")
    (tmp_path / "b.cu").write_text("#include <curand_kernel.h>\n")
    (tmp_path / "c.cu").write_text("#include <cuda_fp16.h>\n")
    mods = [prebuild.Module("fmha", CompiledSpec("fmha", [tmp_path / "a.cu"], []), ["trtllm-fmha-v2"]),
            prebuild.Module("fa3", CompiledSpec("fa3", [tmp_path / "b.cu"], []), ["fa3-prefill"]),
            prebuild.Module("xqa", CompiledSpec("xqa", [tmp_path / "c.cu"], []), ["trtllm-decode"])]
    monkeypatch.setattr(prebuild.Module, "state", property(lambda m: "missing"))
    monkeypatch.setattr(headers, "SYSTEM_LIB_DIRS", ())
    with pytest.raises(BadInput) as e:
        prebuild.check_toolchain(mods, [])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("2 of the 3 modules to build need what this toolchain lacks")
    assert "cublasLt.h, cublas_v2.h (cuBLAS, for trtllm-fmha-v2); curand_kernel.h (cuRAND, for fa3-prefill)" in msg
    assert "nvidia-cublas and nvidia-curand" in msg and "--include" in msg and "--kernels" in msg
    monkeypatch.setattr(prebuild.Module, "state", property(lambda m: "cached"))  # built already: not judged
    prebuild.check_toolchain(mods, [])


@pytest.mark.skipif(not __import__("shutil").which("nvcc"), reason="needs nvcc (a CUDA toolkit)")
def test_prebuild_without_library_headers_fails_before_any_compile(tmp_path):
    """The README's prebuild on a CPU machine whose toolkit has no cuBLAS/cuRAND headers (this one): one line,
    exit 2, in seconds, nothing compiled; with --include of a folder holding them the plan passes the check."""
    toolkit = prebuild.cuda_home_of(__import__("shutil").which("nvcc"))
    if toolkit is None or (toolkit / "include" / "cublasLt.h").exists():
        pytest.skip("this toolkit has the cuBLAS headers")
    env = {"FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws"), "COLUMNS": "300"}
    r = kbench("prebuild", "-s", "draft-extend", "--kv-len", "4096", "--batch-size", "16,64", "--arch", "9.0a",
               "--archive", str(tmp_path / "aot.tgz"), env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    out = (r.stdout + r.stderr).strip().splitlines()
    assert len(out) == 1 and out[0].startswith("error: 2 of the 19 modules to build need"), out
    assert "(cuBLAS, for trtllm-fmha-v2)" in out[0] and "(cuRAND, for fa3-prefill)" in out[0]
    assert not (tmp_path / "aot.tgz").exists() and not list((tmp_path / "ws").rglob("*.o"))
    inc = tmp_path / "inc"
    inc.mkdir()
    for h in ("cublasLt.h", "cublas_v2.h", "curand_kernel.h"):
        (inc / h).write_text("")
    code = ("from kbench.cases.scenario import load_scenario, apply_overrides\n"
            "from kbench.engine.prebuild import plan_prebuild\n"
            "sc = apply_overrides(load_scenario('draft-extend'), kv_len='4096', batch_size='16,64')\n"
            f"print(len(plan_prebuild([sc], '9.0a', [{str(inc)!r}]).modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, **env})
    assert r.returncode == 0 and r.stdout.strip() == "19", (r.stdout, r.stderr)


# --- the archive -------------------------------------------------------------------------------------------
def built_modules(tmp_path, names=("m1", "m2")):
    mods = []
    for n in names:
        s = FakeSpec(n, tmp_path / "ws")
        s.build()
        mods.append(prebuild.Module(n, s))
    return mods


def test_archive_layout_and_version_stamp(tmp_path):
    import flashinfer

    mods = built_modules(tmp_path) + [prebuild.Module("gone", FakeSpec("gone", tmp_path / "ws"))]
    out, n = prebuild.write_archive(tmp_path / "aot.tgz", mods, "9.0a")
    assert n == 2
    with tarfile.open(out) as tar:
        names = sorted(tar.getnames())
        manifest = json.loads(tar.extractfile("aot/KBENCH_PREBUILD.json").read())
        stamp = tar.extractfile("aot/FLASHINFER_VERSION").read().decode().strip()
    assert names == ["aot/FLASHINFER_VERSION", "aot/KBENCH_PREBUILD.json", "aot/m1/m1.so", "aot/m2/m2.so"]
    assert stamp == manifest["flashinfer"] == flashinfer.__version__ and manifest["arch"] == "9.0a"
    assert set(manifest["modules"]) == {"m1", "m2"}  # the module that failed to build is not in it
    assert manifest["modules"]["m1"]["bytes"] == mods[0].spec.jit_library_path.stat().st_size
    assert prebuild.read_manifest(out) == manifest


def test_load_installs_checks_and_is_idempotent(tmp_path):
    out, _ = prebuild.write_archive(tmp_path / "aot.tgz", built_modules(tmp_path), "9.0a")
    dest = tmp_path / "fi-aot"
    first = prebuild.load_archive(out, into=dest, device=H200)
    assert first.installed == ["m1", "m2"] and first.present == []
    assert (dest / "m1" / "m1.so").read_bytes() == shared_library(b"m1")
    again = prebuild.load_archive(out, into=dest, device=H200)
    assert again.installed == [] and again.present == ["m1", "m2"]
    with pytest.raises(BadInput, match=r"built for 9.0a \(SM90\), this GPU is SM100"):
        prebuild.load_archive(out, into=tmp_path / "b", device=DeviceInfo(cuda=True, name="B200", sm=100))
    assert not (tmp_path / "b").exists()  # refused before anything is written


def rewrite(archive: Path, to: Path, change) -> Path:
    """A copy of the archive with its manifest changed by change(manifest) (or members dropped)."""
    with tarfile.open(archive) as src, tarfile.open(to, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name.endswith("KBENCH_PREBUILD.json"):
                data = json.dumps(change(json.loads(data))).encode()
            m.size = len(data)
            import io

            dst.addfile(m, io.BytesIO(data))
    return to


def test_load_refuses_other_flashinfer_bad_names_and_damage(tmp_path):
    out, _ = prebuild.write_archive(tmp_path / "aot.tgz", built_modules(tmp_path), "9.0a")
    old = rewrite(out, tmp_path / "old.tgz", lambda m: {**m, "flashinfer": "0.7.2.post1"})
    with pytest.raises(BadInput, match="built for FlashInfer 0.7.2.post1"):
        prebuild.load_archive(old, into=tmp_path / "d1")
    evil = rewrite(out, tmp_path / "evil.tgz", lambda m: {**m, "modules": {"../../x": m["modules"]["m1"]}})
    with pytest.raises(BadInput, match="not a plain name"):
        prebuild.load_archive(evil, into=tmp_path / "d2")
    damaged = rewrite(out, tmp_path / "dmg.tgz",
                      lambda m: {**m, "modules": {"m1": {**m["modules"]["m1"], "sha256": "0" * 64}}})
    with pytest.raises(BadInput, match="sha256"):
        prebuild.load_archive(damaged, into=tmp_path / "d3")
    assert not (tmp_path / "d3" / "m1" / "m1.so").exists() and not list((tmp_path / "d3").rglob("*.tmp"))
    (tmp_path / "plain.tgz").write_bytes(b"not gzip")
    with pytest.raises(BadInput, match="not a readable"):
        prebuild.read_manifest(tmp_path / "plain.tgz")


@pytest.mark.parametrize("arch,sm", [("9.0a", 90), ("10.0a", 100), ("12.0f", 120), (" 8.0 ", 80)])
def test_parse_arch(arch, sm):
    assert prebuild.parse_arch(arch) == sm


@pytest.mark.parametrize("tag,sm,name", [("90a", 90, "9.0a"), ("100a", 100, "10.0a"), ("120f", 120, "12.0f"), ("80", 80, "8.0")])
def test_arch_name_of_a_gpu_host_reads_back(tag, sm, name, monkeypatch):
    """An archive made on a GPU host without --arch names the architecture as --arch and --load read it."""
    from flashinfer.jit import env

    monkeypatch.setattr(env, "FLASHINFER_WORKSPACE_DIR", Path("/ws/.cache/flashinfer/0.7.4") / tag)
    dev = DeviceInfo(cuda=True, name="gpu", sm=sm)
    assert prebuild.arch_name(dev) == name and prebuild.parse_arch(name) == sm


@pytest.mark.parametrize("arch", ["9", "sm90", "9.0a 10.0a", "", "9.0b"])
def test_bad_arch(arch):
    with pytest.raises(BadInput, match="--arch"):
        prebuild.parse_arch(arch)


# --- the command -------------------------------------------------------------------------------------------
def kbench(*args, env=None, timeout=600):
    """kbench in its own process (FlashInfer imported fresh, for the target --arch names)."""
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", "from kbench.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=e, timeout=timeout)


@pytest.mark.parametrize("args,msg", [
    (["--arch", "sm90"], "--arch: expected one CUDA architecture"),
    (["--arch", "9.0a", "--archive", "/proc/kbench/aot.tgz"], "--archive /proc/kbench: cannot write there"),
    (["--arch", "9.0a", "--batch-size", "x"], "--batch-size"),
    (["--arch", "9.0a", "--kernels", "nope"], "unknown kernel 'nope'"),
    (["--load", "/nonexistent/aot.tgz"], "no such archive"),
    (["--load", "aot.tgz", "--arch", "9.0a"], "as it is: drop --arch"),
    (["--arch", "9.0a", "--include", "/nonexistent"], "--include /nonexistent: not a folder"),
    (["--grid", "-b 4 --arch 9.0a"], "only the sweep's grid options go in a grid, not --arch"),
    (["--grid", "-b 4 '"], "No closing quotation"),
    (["--grid", "-s nosuch"], "nosuch"),
    (["--load", "aot.tgz", "--no-build"], "drop --no-build"),
    (["--arch", "9.0a", "--no-build"], "--no-build packs what is built: give --archive FILE"),
    (["--arch", "9.0a", "--list", "--archive", "a.tgz"], "--list builds and packs nothing: drop --archive"),
])
def test_bad_input_is_one_line_and_exit_2(args, msg, tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)  # restored after, should --arch set it
    r = CliRunner().invoke(cli, ["prebuild", *args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert lines[-1].startswith("error: ") and msg in lines[-1], r.output
    assert "Traceback" not in r.output and "modules for" not in r.output  # refused before planning or building


def test_the_toolchain_is_ready_before_planning(monkeypatch, tmp_path):
    """fmha-v2's spec writes its ninja file while it is planned: CUDA_HOME (from a wrapper nvcc, the stub
    libcuda) must be set before, or the file names /usr/local and the link fails (-lcudart not found)."""
    from kbench.engine import prebuild as pb

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    seen = []
    monkeypatch.setattr(pb, "target_device", lambda arch: H200)  # FlashInfer's JIT folder is another test's
    monkeypatch.setattr(pb, "toolchain", lambda include: monkeypatch.setenv("CUDA_HOME", "/opt/cuda-x") or [])
    monkeypatch.setattr(pb, "plan", lambda *a, **k: seen.append(os.environ.get("CUDA_HOME")) or [])
    r = CliRunner().invoke(cli, ["prebuild", "-s", "quick", "--arch", "9.0a"])
    assert r.exit_code == 0, r.output
    assert seen and set(seen) == {"/opt/cuda-x"}  # every plan() ran with the toolchain's CUDA_HOME
    seen.clear()
    monkeypatch.delenv("CUDA_HOME")
    r = CliRunner().invoke(cli, ["prebuild", "-s", "quick", "--arch", "9.0a", "--list"])
    assert r.exit_code == 0 and seen == [None]  # --list builds nothing: no toolchain asked for


def test_no_gpu_and_no_arch_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    r = CliRunner().invoke(cli, ["prebuild", "-s", "quick"])
    assert r.exit_code == 2 and "no GPU here: name the architecture to build for with --arch" in r.output


def test_archive_given_a_folder_is_refused(tmp_path):
    r = CliRunner().invoke(cli, ["prebuild", "--arch", "9.0a", "--archive", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "is a directory" in r.output


def test_list_plans_the_readme_sweep_with_flashinfer_names(tmp_path):
    """The README sweep's modules on SM90, from FlashInfer 0.7.4's own generators: xqa for each q_len of the
    grid, one FA2 module shared by decode-wrapper and fa2-prefill (not its independent-stride variant), FA3's
    SM90 module, fmha-v2 for HND bf16, nothing for trtllm-context (SM100 only); one present in the cache."""
    from kbench.cases.scenario import load_scenario

    env = {"FLASHINFER_WORKSPACE_BASE": str(tmp_path), "COLUMNS": "400"}
    fa2 = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
           "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_kv_stride_equal")
    so = tmp_path / ".cache" / "flashinfer"
    r = kbench("prebuild", "-s", "draft-extend", "--kv-len", "4096", "--batch-size", "16,64", "--arch", "9.0a", "--list",
               env=env)
    assert r.returncode == 0, r.stderr
    rows = [line.split("│")[1:4] for line in r.stdout.splitlines() if line.startswith("│")]
    mods = {m.strip(): (s.strip(), k.strip()) for s, m, k in rows}
    xqa = {int(n.rsplit("_", 1)[1]) for n in mods if n.startswith("xqa_")}
    assert xqa == set(load_scenario("draft-extend").q_len)
    assert all("use_spec_dec_True" in n for n in mods if n.startswith("xqa_") and not n.endswith("_len_1"))
    assert mods[fa2][1] == "decode-wrapper, fa2-prefill"
    assert not [n for n in mods if "independent" in n]
    assert [k for _, k in mods.values()].count("fa3-prefill") == 1 and any(n.endswith("_sm90") for n in mods)
    assert mods["trtllm_fmha_v2_q_paged_kv_hnd_bf16_bf16"][1] == "trtllm-fmha-v2"
    assert not any("trtllm-context" in k for _, k in mods.values())
    assert len(mods) == len(xqa) + 3 and {s for s, _ in mods.values()} == {"missing"}
    # one module built in the JIT cache of that target: listed as cached
    lib = so / "0.7.4" / "90a" / "cached_ops" / fa2 / f"{fa2}.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    r = kbench("prebuild", "-s", "draft-extend", "--kv-len", "4096", "--batch-size", "16", "--q-len", "32,64",
               "--kernels", "trtllm-decode,fa2-prefill", "--arch", "9.0a", "--list", env=env)
    rows = [line.split("│")[1:4] for line in r.stdout.splitlines() if line.startswith("│")]
    assert sorted((s.strip(), m.strip()[-12:]) for s, m, _ in rows) == [
        ("cached", fa2[-12:]), ("missing", "q_seq_len_32"), ("missing", "q_seq_len_64")]
    assert "1 cached, 2 missing" in r.stdout
    # both grids in one plan: the FA2 module they share once
    r = kbench("prebuild", "--grid", "-s draft-extend --kv-len 4096 --batch-size 16,64", "--grid",
               "-s draft-extend -k 4096 -b 16 -q 32,64 --kernels trtllm-decode,fa2-prefill", "--arch", "9.0a", "--list",
               env=env)
    rows = [line.split("│")[2].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == len(set(rows)) == len(mods) + 2 and set(mods) < set(rows), r.stdout


def test_a_draft_tree_adds_the_mask_packing_module_to_fa2(tmp_path):
    """fa2's plan(custom_mask=) packs a tree with FlashInfer's quantization module (segment_packbits): planned
    for the tree cases of fa2-prefill only."""
    r = kbench("prebuild", "-s", "eagle-tree", "-b", "4", "-k", "1024", "--kernels", "fa2-prefill,fa3-prefill",
               "--arch", "9.0a", "--list", env={"FLASHINFER_WORKSPACE_BASE": str(tmp_path), "COLUMNS": "400"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip() for line in r.stdout.splitlines() if line.startswith("│")}
    assert rows.get("quantization") == "fa2-prefill", rows
    r = kbench("prebuild", "-s", "eagle-tree", "-b", "4", "-k", "1024", "--tree", "chain", "--kernels", "fa2-prefill",
               "--arch", "9.0a", "--list", env={"FLASHINFER_WORKSPACE_BASE": str(tmp_path), "COLUMNS": "400"})
    assert r.returncode == 0 and "quantization" not in r.stdout, r.stdout


def test_equal_jit_keys_mean_equal_modules(tmp_path):
    """The plan asks each (kernel, jit_key) once: every kernel's jit_key must separate cases whose modules differ
    (FlashInfer's names, over realistic axes, on SM90 and SM100)."""
    code = r"""
import json, sys
from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.kernels.registry import select
sm = int(sys.argv[1])
dev = DeviceInfo(cuda=True, name="t", sm=sm)
axes = dict(batch_size="2", q_len="1,3,8", kv_len="256", q_dist="fixed,accept:0.7", window_left="-1,64", page_size="16,64",
            tree="chain,topk:2")
cases = [c for kv in (dict(kv_dtype="bf16"), dict(kv_dtype="fp8", q_dtype="dtype,fp8"))
         for c in apply_overrides(load_scenario("quick"), **axes, **kv).cases()]
bad, n = [], 0
for k in select(["all"]):
    if k.path == "reference" or k.name == "trtllm-fmha-v2":  # fmha-v2's names take seconds each; its key is plain
        continue
    seen = {}
    for c in cases:
        if kernel_reason(k, dev, c) or k.jit_key(c) is None:
            continue
        names = sorted(s.name for s in k.jit_specs(dev, c))
        n += 1
        if seen.setdefault(k.jit_key(c), names) != names:
            bad.append((k.name, c.case_id))
print(json.dumps({"bad": bad, "n": n}))
"""
    for arch, sm in (("9.0a", "90"), ("10.0a", "100")):
        r = subprocess.run([sys.executable, "-c", code, sm], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "FLASHINFER_CUDA_ARCH_LIST": arch, "FLASHINFER_WORKSPACE_BASE": str(tmp_path)})
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["n"] > 10 and out["bad"] == [], out


def test_env_shows_the_jit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    lib = tmp_path / ".cache" / "flashinfer" / "0.7.4" / "90a" / "cached_ops" / "m" / "m.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"x" * 1000)
    info = cache_info()
    assert info.workspace_base == str(tmp_path) and info.workspace_from == "FLASHINFER_WORKSPACE_BASE"
    assert info.builds == {"0.7.4/90a": 1} and info.cache_bytes == 1000
    assert info.packages["flashinfer-python"] and "flashinfer-jit-cache" in info.packages
    r = CliRunner().invoke(cli, ["env", "--json", "--no-bandwidth"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["flashinfer_cache"]
    assert got["builds"] == {"0.7.4/90a": 1} and got["cache_dir"] == str(tmp_path / ".cache" / "flashinfer")


def test_cuda_home_of_a_wrapper_script_is_the_toolkit_it_runs(tmp_path):
    """/usr/local/bin/nvcc as a script exec-ing a toolkit's nvcc: CUDA_HOME is that toolkit, not /usr/local (where
    cuda.h is missing and the xqa build failed with 'cuda.h: No such file or directory')."""
    from kbench.engine.prebuild import cuda_home_of

    kit = tmp_path / "cuda-13.0"
    (kit / "bin").mkdir(parents=True)
    (kit / "include").mkdir()
    (kit / "include" / "cuda.h").write_text("")
    (kit / "bin" / "nvcc").write_text("")
    wrapper = tmp_path / "local" / "bin" / "nvcc"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f"#!/bin/sh\nexec {kit}/bin/nvcc \"$@\"\n")
    assert cuda_home_of(str(wrapper)) == kit
    assert cuda_home_of(str(kit / "bin" / "nvcc")) == kit


def test_the_archive_never_replaces_a_file_the_grid_is_read_from(tmp_path, monkeypatch):
    # --archive s.toml (or the --kv-dist/--tree file) was packed over the scenario with exit 0
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "jit"))
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    shutil.copy(Path(__file__).resolve().parent.parent / "scenarios" / "quick.toml", "s.toml")
    Path("lens.csv").write_text("100\n200\n300\n400\n")
    Path("tree.txt").write_text("-1 0\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for args in (["-s", "s.toml", "--archive", "s.toml"], ["--kv-dist", "file:lens.csv", "--archive", "lens.csv"],
                 ["--tree", "file:tree.txt", "--archive", "./tree.txt"], ["--grid", "-s s.toml", "--archive", "s.toml"]):
        r = CliRunner().invoke(cli, ["prebuild", "--arch", "9.0a", "--no-build", *args])
        assert r.exit_code == 2 and "writing there would replace what the command reads" in r.output, (args, r.output)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    # the same rule from Python (kbench.engine.prebuild.prebuild), a lengths file included
    from kbench.cases.scenario import apply_overrides, load_scenario

    sc = apply_overrides(load_scenario("s.toml"), kv_dist="file:lens.csv")
    for out in ("s.toml", "./lens.csv"):
        with pytest.raises(BadInput, match="writing there would replace what the command reads"):
            prebuild.prebuild([sc], "9.0a", build_modules=False, archive=out)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_no_build_with_nothing_built_packs_no_empty_archive(tmp_path):
    # it wrote a 0-module archive with exit 0, which loads "fine" on the GPU host and saves nothing
    r = kbench("prebuild", "-s", "quick", "--arch", "9.0a", "--no-build", "--archive", str(tmp_path / "a.tgz"),
               env={"FLASHINFER_WORKSPACE_BASE": str(tmp_path / "empty-jit"), "FLASHINFER_CUDA_ARCH_LIST": ""})
    assert r.returncode == 2 and "nothing to pack" in r.stderr and not (tmp_path / "a.tgz").exists(), r.stderr


def test_use_jit_cache_sets_the_folder_and_refuses_one_flashinfer_would_ignore(tmp_path):
    """kbench.engine.jit_cache.use_jit_cache is --jit-cache for a Python user: it sets FLASHINFER_WORKSPACE_BASE
    before FlashInfer reads it, and refuses a new folder once FlashInfer has read another (it would be ignored)."""
    code = r"""
import os, sys
from kbench.engine.jit_cache import use_jit_cache, cache_info
from kbench.errors import BadInput
a, b = sys.argv[1], sys.argv[2]
print(use_jit_cache(a) == os.path.abspath(a), os.environ["FLASHINFER_WORKSPACE_BASE"] == os.path.abspath(a))
print(cache_info().cache_dir == os.path.join(os.path.abspath(a), ".cache", "flashinfer"))
import flashinfer.jit.env as env
print(str(env.FLASHINFER_BASE_DIR) == os.path.abspath(a))
print(use_jit_cache(a) == os.path.abspath(a))  # the same folder again: fine
try:
    use_jit_cache(b)
    print("accepted")
except BadInput as e:
    print("refused:", e)
print(os.environ["FLASHINFER_WORKSPACE_BASE"] == os.path.abspath(a))
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr
    assert lines[:4] == ["True True", "True", "True", "True"], out.stdout
    assert lines[4].startswith(f"refused: --jit-cache {tmp_path / 'b'}: FlashInfer is already loaded"), lines[4]
    assert lines[5] == "True"
    with pytest.raises(BadInput, match="--jit-cache"):
        from kbench.engine.jit_cache import use_jit_cache

        (tmp_path / "file").write_text("x")
        use_jit_cache(tmp_path / "file")


def test_prebuild_from_python_joins_grids_builds_and_packs(tmp_path, monkeypatch):
    """kbench.engine.prebuild.prebuild is `kbench prebuild --grid A --grid B --archive F` without the CLI: every
    scenario's modules once, the missing ones built (a failure reported, not raised), the built ones packed."""
    from kbench.kernels import registry

    monkeypatch.setenv("MAX_JOBS", "1")  # build_plan sets it to --jobs
    targets = []  # FlashInfer is imported in this process: the target is asked for, not set (its own tests above)
    monkeypatch.setattr(prebuild, "target_device", lambda arch: targets.append(arch) or H200)
    a, b = FakeKernel("a", tmp_path), FakeKernel("b", tmp_path, shared="shared")
    monkeypatch.setattr(registry, "select", lambda names, where: [a] if names == ["a"] else [a, b])
    monkeypatch.setattr(prebuild, "toolchain", lambda include: ["a note"])
    one = Scenario(name="one", heads=MODELS["llama3-8b"], batch_size=[1], q_len=[1, 2], kv_len=[64], page_size=[16],
                   kernels=["a"]).validate()
    two = Scenario(name="two", heads=MODELS["llama3-8b"], batch_size=[1], q_len=[2, 4], kv_len=[64], page_size=[16],
                   kernels=["a", "b"]).validate()
    packed = {}
    monkeypatch.setattr(prebuild, "write_archive",
                        lambda out, modules, arch: packed.update(out=out, arch=arch, names=[m.name for m in modules])
                        or (Path(out), len(modules)))
    res = prebuild.prebuild([one, two], "9.0a", archive=tmp_path / "aot.tgz", parallel=2, jobs=3)
    names = [m.name for m in res.plan.modules]
    assert names == ["a_q1", "shared", "a_q2", "b_q2", "a_q4", "b_q4"]  # in the order first needed, each once
    assert targets == ["9.0a"] and res.plan.notes == ["a note"] and os.environ["MAX_JOBS"] == "3"
    assert sorted(o.module for o in res.outcomes) == sorted(names) and not res.failed
    assert all(o.status == "built" for o in res.outcomes)
    assert packed == {"out": tmp_path / "aot.tgz", "arch": "9.0a", "names": names} and res.archived == len(names)
    again = prebuild.prebuild([two], "9.0a")  # what is built is not built again
    assert {o.status for o in again.outcomes} == {"cached"} and again.archive is None
