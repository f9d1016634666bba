"""kbench recommend: prices against known formulas, the oracle and its drivers, interpolation as select does,
extrapolation said and bounded, and every bad input as one line, exit 2."""
from __future__ import annotations

import json

import pytest
from recommend_synth import (B200, DECODE, FA2, FA3, GQA_KERNELS, HOST, batch_price, known_rows, known_run, recommend_cli, step_price, t_decode,
                             t_fa2)
from report_synth import case, row, write_run

from kbench.errors import BadInput
from kbench.recommend.price import load_source, recommend
from kbench.recommend.render import command as render_command
from kbench.recommend.settings import load_table
from kbench.recommend.workload import Batch, Workload, from_options
from kbench.report.policy import lookup

SGLANG = load_table().engine("sglang")
VLLM = load_table().engine("vllm")
BOTH = ("verify", "draft_extend")


def wl(*batches):
    return Workload([Batch(bs, q, kv, w) for bs, q, kv, w in batches], "test")


def price(setting, batches, layers=None, overlap="max"):
    """A setting's total over (bs, q, kv, weight) batches, from the synthetic formulas (not kbench's code)."""
    layers = layers or {"verify": 1, "draft_extend": 1}
    s = SGLANG.setting(setting) if setting in {x.id for x in SGLANG.settings} else VLLM.setting(setting)
    routes = {st: s.route(st, "sm90", "0.7.4").route for st in BOTH}
    return sum(w * batch_price(routes, bs, q, kv, layers, overlap) for bs, q, kv, w in batches)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return load_source([known_run(tmp_path_factory.mktemp("rec") / "run")])


def test_each_setting_is_priced_with_its_routes_host_work_and_kernel(src):
    batches = ((1, 4, 1024, 3.0), (8, 4, 4096, 1.0))
    for overlap in ("max", "sum"):
        rec = recommend(src, wl(*batches), SGLANG, overlap=overlap, layers={"verify": 32, "draft_extend": 1})
        by_id = {r.setting.id: r for r in rec.results}
        priced = [r for r in rec.results if r.total_us is not None]
        # the sync-free verify plan's route (sglang-fi-verify-hostplan) is not in the synthetic run: not priced
        assert {r.setting.id for r in priced} == {s.id for s in SGLANG.valid_on("sm90")} - {
            "triton", "flashinfer+verify-host-plan"}
        for r in priced:
            want = price(r.setting.id, batches, {"verify": 32, "draft_extend": 1}, overlap)
            assert r.total_us == pytest.approx(want, rel=1e-4), (overlap, r.setting.id)
            assert r.per_step_us == pytest.approx(want / 4.0, rel=1e-4)
            assert r.host_us == pytest.approx(sum(w * HOST[r.kernels[st]] for *_, w in batches for st in BOTH))
        cheapest = min(price(r.setting.id, batches, {"verify": 32, "draft_extend": 1}, overlap) for r in priced)
        assert rec.best.total_us == pytest.approx(cheapest, rel=1e-4)
        assert by_id["triton"].total_us is None and "not a kbench kernel" in by_id["triton"].unpriced
        # the run is at page 64 and the chain's topk is 1: SGLang resolves flashinfer there (fa3 only at page 1)
        assert by_id["flashinfer"].default and not by_id["fa3"].default
        assert by_id["fa3"].kernels == {"verify": "sglang-fa3", "draft_extend": "sglang-fa3"}
        assert rec.overlap == overlap and rec.host_cpus == 16 and rec.host_cpu == "Synthetic Xeon"
    # overlapped, the verify route's host work still adds (its plan waits for the GPU), and the scheduler waits for
    # the previous verify before preparing the step: the rest of the host work overlaps the draft extend alone
    rec = recommend(src, wl((8, 4, 4096, 1.0)), SGLANG, settings=["flashinfer"], overlap="max")
    assert rec.results[0].fenced
    assert rec.results[0].total_us == pytest.approx(HOST["sglang-fi-verify"] + 1.25 * t_fa2(8, 4, 4096) + max(
        HOST["sglang-fi-extend"], t_fa2(8, 4, 4096)))
    rec = recommend(src, wl((1, 4, 1024, 1.0)), SGLANG, settings=["trtllm_mha"], overlap="max")
    assert rec.results[0].total_us == pytest.approx(max(2 * HOST["sglang-trtllm-mha"], 2 * t_decode(1, 4, 1024)))


def test_the_engines_overlap_rule_is_the_default_and_cited(src):
    rec = recommend(src, wl((1, 4, 1024, 1.0)), SGLANG)
    assert rec.overlap == "max" and "sglang 0.5.23's default" in rec.overlap_from
    assert SGLANG.overlap_modes == {"max": "", "sum": "--disable-overlap-schedule"}
    assert VLLM.overlap_modes == {"max": "", "sum": "--no-async-scheduling"}
    assert {c.file for c in SGLANG.overlap_cites} >= {"python/sglang/srt/arg_groups/speculative_hook.py"}
    assert {c.file for c in VLLM.overlap_cites} >= {"vllm/config/vllm.py"}
    with pytest.raises(BadInput, match="--host-overlap 'both': one of engine, max, sum"):
        recommend(src, wl((1, 4, 1024, 1.0)), SGLANG, overlap="both")


def test_layers_and_steps_weight_the_steps(src):
    rec = recommend(src, wl((1, 4, 1024, 1.0)), SGLANG, settings=["trtllm_mha+draft-flashinfer"],
                    layers={"verify": 32, "draft_extend": 1}, overlap="sum")
    assert rec.results[0].total_us == pytest.approx(
        step_price("sglang-trtllm-mha", 1, 4, 1024, 32, "sum") + step_price("sglang-fi-extend", 1, 4, 1024, 1, "sum"))
    only = Workload([Batch(1, 4, 1024, 1.0, steps=("verify",))], "test")
    rec = recommend(src, only, SGLANG, settings=["trtllm_mha+draft-flashinfer"], overlap="sum")
    assert rec.results[0].total_us == pytest.approx(step_price("sglang-trtllm-mha", 1, 4, 1024, 1, "sum"))


def test_between_grid_points_it_prices_the_neighbour_select_answers_with(src):
    for bs, q, kv in ((2, 3, 2000), (3, 4, 2100), (5, 2, 3000), (1, 3, 1500)):
        rec = recommend(src, wl((bs, q, kv, 1.0)), SGLANG, settings=["trtllm_mha"], overlap="sum")
        used = lookup(src.policy, bs, q, kv)["used"]
        assert rec.results[0].total_us == pytest.approx(2 * step_price(
            "sglang-trtllm-mha", used["batch_size"], used["q_len"], used["kv_len"], 1, "sum"), rel=1e-4)
        assert rec.interpolated_weight == 1.0


def test_extrapolation_is_priced_at_the_edge_and_said_with_how_far(src):
    rec = recommend(src, wl((16, 4, 4096, 1.0), (1, 4, 1024, 1.0)), SGLANG, settings=["trtllm_mha"], overlap="sum")
    assert len(rec.extrapolated) == 1 and rec.extrapolated[0].beyond == {"batch_size": 2.0}
    assert rec.results[0].total_us == pytest.approx(2 * (step_price("sglang-trtllm-mha", 8, 4, 4096, 1, "sum")
                                                         + step_price("sglang-trtllm-mha", 1, 4, 1024, 1, "sum")))
    with pytest.raises(BadInput, match=r"batch_size 64 is 8\.0x beyond the run's 1\.\.8"):
        recommend(src, wl((64, 4, 4096, 1.0)), SGLANG)
    rec = recommend(src, wl((64, 4, 4096, 1.0)), SGLANG, max_extrapolation=8)
    assert rec.extrapolated[0].beyond == {"batch_size": 8.0}
    with pytest.raises(BadInput, match="kv_len 256 is 4.0x beyond"):
        recommend(src, wl((1, 2, 256, 1.0)), SGLANG)
    rec = recommend(src, wl((1024, 4, 4096, 1.0)), SGLANG, max_extrapolation=float("inf"))  # inf: no limit
    assert rec.extrapolated[0].beyond == {"batch_size": 128.0}
    with pytest.raises(BadInput, match="must be >= 1"):
        recommend(src, wl((16, 4, 4096, 1.0)), SGLANG, max_extrapolation=float("nan"))


def test_vllm_prices_its_routes_and_a_setting_without_one_gets_a_bound_never_best(src):
    rec = recommend(src, wl((8, 4, 4096, 1.0)), VLLM, overlap="sum")
    by_id = {r.setting.id: r for r in rec.results}
    assert by_id["FLASHINFER"].kernels == {"verify": "vllm-fi-decode", "draft_extend": "vllm-fi-decode"}
    off = by_id["FLASHINFER,use_trtllm_attention=false"]
    # vLLM 0.34.0 pins FlashInfer 0.7.3, where auto is fa3 on SM90: its route, not measured in this run, leaves a
    # bound from the plain fa3-prefill kernel
    assert off.kernels["verify"] == "vllm-fi-prefill-fa3" and off.total_us is None
    assert "vllm-fi-prefill-fa3 at bs 8 q 4 kv 4096" in off.missing[0]
    assert off.bound_us == pytest.approx(2 * 3 * t_fa2(8, 4, 4096))
    # the drafter reuses the target's metadata: one host step (FLASH_ATTN 8 us) beside two of GPU work, 65.6 us,
    # below FLASHINFER's 3 + 64 us
    assert rec.best.setting.id == "FLASH_ATTN" and rec.best.total_us == pytest.approx(
        batch_price({"verify": "vllm-flash-attn", "draft_extend": "vllm-flash-attn"}, 8, 4, 4096,
                    {"verify": 1, "draft_extend": 1}, "sum"))
    assert rec.best.host_us == pytest.approx(HOST["vllm-flash-attn"])
    rec = recommend(src, wl((8, 4, 4096, 1.0)), VLLM, flashinfer="0.7.4", overlap="sum")
    off = {r.setting.id: r for r in rec.results}["FLASHINFER,use_trtllm_attention=false"]
    assert off.kernels["verify"] == "vllm-fi-prefill" and off.total_us == pytest.approx(
        2 * step_price("vllm-fi-prefill", 8, 4, 4096, 1, "sum") - HOST["vllm-fi-prefill"])
    for given, read, verify in (("v0.7.4", "0.7.4", "vllm-fi-prefill"), ("0.7.4+cu128", "0.7.4+cu128", "vllm-fi-prefill"),
                                ("0.7.3.post1", "0.7.3.post1", "vllm-fi-prefill-fa3")):
        rec = recommend(src, wl((8, 4, 4096, 1.0)), VLLM, flashinfer=given)  # read as pip reads a version
        assert rec.flashinfer == read and {r.setting.id: r for r in rec.results}[
            "FLASHINFER,use_trtllm_attention=false"].kernels["verify"] == verify
    for junk in ("abc", "0.7.4abc", "", "latest"):  # was taken as given, its routes compared as a string
        with pytest.raises(BadInput, match=f"--flashinfer {junk!r}: not a version"):
            recommend(src, wl((8, 4, 4096, 1.0)), VLLM, flashinfer=junk)


def test_vllm_flashinfer_without_trtllm_is_priced_on_its_fa3_route_below_flashinfer_0_7_4(tmp_path):
    rows = known_rows(kernels=GQA_KERNELS + ("vllm-fi-prefill-fa3",))
    s = load_source([known_run(tmp_path / "run", rows)])
    rec = recommend(s, wl((8, 4, 4096, 1.0)), VLLM, overlap="sum")
    off = {r.setting.id: r for r in rec.results}["FLASHINFER,use_trtllm_attention=false"]
    # the drafter reuses the target's metadata: one host step, two of GPU work; its host work waits for the GPU
    assert off.kernels == {"verify": "vllm-fi-prefill-fa3", "draft_extend": "vllm-fi-prefill-fa3"}
    assert off.total_us == pytest.approx(2 * step_price("vllm-fi-prefill-fa3", 8, 4, 4096, 1, "sum")
                                         - HOST["vllm-fi-prefill-fa3"])


def test_a_route_without_rows_leaves_its_setting_unpriced_with_a_bound(tmp_path):
    rows = [r for r in known_rows() if not (r.kernel == "sglang-trtllm-mha" and r.batch_size == 8)]
    s = load_source([known_run(tmp_path / "run", rows)])
    rec = recommend(s, wl((8, 4, 4096, 1.0)), SGLANG, overlap="sum")
    r = {x.setting.id: x for x in rec.results}["trtllm_mha"]
    assert r.total_us is None and "sglang-trtllm-mha at bs 8 q 4 kv 4096" in r.missing[0]
    assert "kbench sweep --kernels routes" in r.unpriced and r.bound_us == pytest.approx(2 * t_decode(8, 4, 4096))
    assert rec.best is not None and "sglang-trtllm-mha" not in rec.best.kernels.values()
    # a run of plain kernels only (every committed baseline before routes): bounds only, nothing named best
    s = load_source([known_run(tmp_path / "plain", known_rows(kernels=(DECODE, FA2, FA3)))])
    rec = recommend(s, wl((8, 4, 4096, 1.0)), SGLANG)
    assert rec.best is None and all(r.total_us is None for r in rec.results)
    assert {r.setting.id: r.bound_us for r in rec.results}["trtllm_mha"] == pytest.approx(2 * t_decode(8, 4, 4096))


def test_a_tie_within_the_noise_goes_to_the_default_then_the_fewest_flags(src):
    # trtllm_mha and the splits that run it in both steps cost the same: the single flag leads
    rec = recommend(src, wl((1, 4, 1024, 1.0)), SGLANG, overlap="sum")
    same = [r for r in rec.results if r.kernels == {"verify": "sglang-trtllm-mha", "draft_extend": "sglang-trtllm-mha"}]
    assert len(same) == 3 and same[0].setting.id == "trtllm_mha"
    assert set(same[0].tied_with) >= {x.setting.id for x in same[1:]}
    assert [r.setting.id for r in rec.results].index("trtllm_mha") < min(
        [r.setting.id for r in rec.results].index(x.setting.id) for x in same[1:])


def test_ragged_q_has_no_route_so_it_is_bounded_not_priced(tmp_path):
    rows = [row(k, case(8, 4, 4096, q_dist="accept:0.7"), t, rel=0.001)
            for k, t in (("trtllm-decode", 30.0), ("trtllm-decode-ragged", 20.0), (FA2, 25.0))]
    s = load_source([write_run(tmp_path / "run", rows)])
    work = from_options({"batch_size": "8", "q_len": "4", "kv_len": "4096"}, {"q_dist": "accept:0.7"})
    r = recommend(s, work, VLLM, settings=["FLASHINFER"]).results[0]
    assert r.total_us is None and r.bound_us == pytest.approx(40.0)  # the ragged kernel for both steps, a bound
    r = recommend(s, work, SGLANG, settings=["trtllm_mha"]).results[0]
    assert r.total_us is None and r.bound_us == pytest.approx(60.0)  # SGLang pads: the uniform kernel


def test_run_and_its_policy_give_the_same_answer(tmp_path):
    from kbench.report import build_report

    run = known_run(tmp_path / "run")
    res = build_report([run], tmp_path / "rep")
    work = wl((2, 4, 2000, 1.0), (8, 4, 4096, 2.0))
    a, b = recommend(load_source([run]), work, SGLANG), recommend(load_source([res.out_dir / "policy.json"]), work, SGLANG)
    assert [(r.setting.id, r.total_us) for r in a.results] == [(r.setting.id, r.total_us) for r in b.results]


# ---- bad input: one line, exit 2 ---------------------------------------------------------------------------
def test_bad_input_is_one_line_exit_2(tmp_path):
    run = known_run(tmp_path / "run")
    tree_run = write_run(tmp_path / "trees", known_rows(qs=(1, 2, 4)) + known_rows(qs=(4,), tree="topk:2"))
    shape = ["--batch-size", "8", "--q-len", "4", "--kv-len", "4096"]
    work = tmp_path / "w.jsonl"
    cases = {
        "unknown engine": ([run, "--engine", "tgi", *shape], "unknown engine"),
        "unknown setting": ([run, "--engine", "sglang", "--setting", "nope", *shape], "has no setting 'nope'"),
        "setting not valid on the GPU": ([run, "--engine", "sglang", "--setting", "fa3", *shape, "--gpu", "sm90"], None),
        "another GPU": ([run, "--engine", "sglang", *shape, "--gpu", "SM100"], "another GPU"),
        "far outside": ([run, "--engine", "sglang", "--batch-size", "256", "--q-len", "4", "--kv-len", "4096"],
                        "32.0x beyond the run's 1..8"),
        "not JSON": ([run, "--engine", "sglang", "--workload", work], "line 2: not JSON"),
        "both ways": ([run, "--engine", "sglang", "--workload", work, "--q-len", "4"], "give the workload one way"),
        "no shape": ([run, "--engine", "sglang", "--q-len", "4"], "--batch-size, --kv-len"),
        "bad steps": ([run, "--engine", "sglang", *shape, "--steps", "prefill"], "--steps"),
        "no engine": ([run, *shape], "--engine: give one of"),
        "flashinfer not a version": ([run, "--engine", "sglang", *shape, "--flashinfer", "abc"],
                                     "--flashinfer 'abc': not a version (expected one like 0.7.4"),
        "threshold not a number": ([run, "--engine", "sglang", *shape, "--threshold", "abc"],
                                   "--threshold 'abc': expected a percentage like 5% or a fraction like 0.05"),
        "threshold out of range": ([run, "--engine", "sglang", *shape, "--threshold", "5"],
                                   "--threshold '5': must be between 0% and 100% (did you mean 5%?)"),
        "draft layers huge": ([run, "--engine", "sglang", *shape, "--draft-layers", "99999999999999999999"],
                              "--draft-layers 99999999999999999999: attention layers of a model, 0..1000"),
        "verify layers above": ([run, "--engine", "sglang", *shape, "--verify-layers", "1001"],
                                "--verify-layers 1001: attention layers of a model, 0..1000"),
        "weights overflow": ([run, "--engine", "sglang", "--batch-size", "1@1e308,8@1e308", "--q-len", "4",
                              "--kv-len", "4096"], "weight '1e308' must be a number from 0 to 1e+12"),
        "overlap mode unknown": ([run, "--engine", "sglang", *shape, "--host-overlap", "both"],
                                 "--host-overlap 'both': one of engine, max, sum"),
        "q_len without a draft": ([run, "--engine", "sglang", "--batch-size", "8", "--q-len", "1", "--kv-len",
                                   "4096"], "q_len 1 verifies no draft token"),
        "two q_lens": ([run, "--engine", "vllm", "--batch-size", "8", "--q-len", "2,4", "--kv-len", "4096"],
                       "a server runs one speculative config"),
        "trtllm_mha with a tree": ([tree_run, "--engine", "sglang", "--setting", "trtllm_mha", *shape, "--tree",
                                    "topk:2"], "supports topk 1 only"),
        "a tree on vLLM": ([tree_run, "--engine", "vllm", "--setting", "FLASHINFER", *shape, "--tree", "topk:2"],
                           "vLLM drafts chains only"),
        "an MLA setting on a GQA run": ([run, "--engine", "sglang", "--setting", "mla:flashmla", *shape],
                                        "is for MLA models and the workload's group is GQA"),
    }
    work.write_text('{"batch_size": 8, "q_len": 4, "kv_len": 4096}\n{"batch_size": 8,\n')
    for name, (args, msg) in cases.items():
        res = recommend_cli(*args)
        if name == "setting not valid on the GPU":  # fa3 runs on Hopper: valid on this H200 run, refused on a B200
            assert res.exit_code == 0, res.output
            b200 = known_run(tmp_path / "b200", device=B200)
            res = recommend_cli(b200, "--engine", "sglang", "--setting", "fa3", *shape)
            msg = "is not valid on SM100/SM103 (Blackwell), the GPU of"
        assert res.exit_code == 2, (name, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], (name, res.output)


def test_policy_without_kernel_times_or_from_another_schema_is_refused(tmp_path):
    from kbench.report import build_report

    res = build_report([known_run(tmp_path / "run")], tmp_path / "rep")
    pol = json.loads((res.out_dir / "policy.json").read_text())
    for g in pol["groups"]:
        for c in g["cells"]:
            c.pop("kernels_us")
    (tmp_path / "old.json").write_text(json.dumps(pol))
    r = recommend_cli(tmp_path / "old.json", "--engine", "sglang", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096")
    assert r.exit_code == 2 and "keeps only each case's winner" in r.output
    pol["schema"] = "kbench.policy/9"
    (tmp_path / "other.json").write_text(json.dumps(pol))
    r = recommend_cli(tmp_path / "other.json", "--engine", "vllm", "--batch-size", "8", "--q-len", "4", "--kv-len", "4096")
    assert r.exit_code == 2 and "is not 'kbench.policy/2'" in r.output


def test_cpu_run_is_refused(tmp_path):
    rows = [row("reference", case(1, 2, 1024), 5.0, path="reference")]
    cpu = write_run(tmp_path / "cpu", rows, reference=False, device={"name": "cpu", "sm": None})
    r = recommend_cli(cpu, "--engine", "sglang", "--batch-size", "1", "--q-len", "2", "--kv-len", "1024")
    assert r.exit_code == 2 and "no row with status ok" in r.output


def test_cli_outputs_json_markdown_and_a_table(tmp_path):
    run = known_run(tmp_path / "run")
    shape = ["--batch-size", "1@3,8", "--q-len", "4", "--kv-len", "1024,4096"]
    batches = [(bs, 4, kv, w) for bs, w in ((1, 3.0), (8, 1.0)) for kv in (1024, 4096)]
    r = recommend_cli(run, "--engine", "sglang", *shape, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    priced = {s["id"]: s for s in data["settings"] if s["total_us"] is not None}
    cheapest = min(priced, key=lambda i: price(i, batches))
    assert data["best"]["total_us"] == pytest.approx(price(cheapest, batches), rel=1e-4)
    assert data["best"]["id"] in (cheapest, *priced[cheapest]["tied_with"])
    assert data["best"]["flags"] in data["best"]["command"] and data["best"]["command"] == priced[data["best"]["id"]]["command"]
    assert data["overlap"]["mode"] == "max" and data["host"] == {"cpus": 16, "cpu": "Synthetic Xeon"}
    assert data["spec"] == {"q_len": 4, "topk": 1, "steps": 3} and data["page_size"] == 64
    assert data["gpu"] == {"family": "sm90", "device": "NVIDIA H200", "sm": 90}
    assert {s["id"] for s in data["settings"]} == {s.id for s in SGLANG.valid_on("sm90")}
    md = tmp_path / "rec.md"
    r = recommend_cli(run, "--engine", "sglang", *shape, "--markdown", md)
    assert r.exit_code == 0, r.output
    text = md.read_text()
    assert f"```sh\n{data['best']['command']}\n```" in text and "| trtllm_mha |" in text
    assert "set: " + data["best"]["command"] in " ".join(r.output.split()) and "host us" in r.output


def test_committed_baselines_of_plain_kernels_give_bounds_and_name_no_setting(tmp_path):
    base = "results/baselines/h200-draft-extend-kv4096"
    r = recommend_cli(base, "--engine", "sglang", "--batch-size", "64", "--q-len", "4",
                      "--kv-len", "lognormal:4096:1.0", "--json", "--max-extrapolation", "16")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["extrapolated"] and data["best"] is None
    assert all(s["total_us"] is None for s in data["settings"])
    assert {s["id"] for s in data["settings"] if s["bound_per_step_us"]} >= {"flashinfer", "trtllm_mha"}
    r = recommend_cli(base, "--engine", "vllm", "--batch-size", "16,64", "--q-len", "4", "--kv-len", "4096")
    assert r.exit_code == 0, r.output
    assert "no setting of this engine can be priced from these measurements" in r.output
    assert "kbench sweep -s engine-routes" in r.output and "set:" not in r.output


def test_draft_trees_are_priced_by_their_routes_and_refused_where_the_engine_refuses(tmp_path):
    rows = known_rows() + known_rows(qs=(4, 8), tree="topk:2")
    s = load_source([write_run(tmp_path / "run", rows)])
    chain = from_options({"batch_size": "8", "q_len": "4", "kv_len": "4096"}, {"tree": "chain"})
    assert recommend(s, chain, SGLANG).best is not None
    tree = from_options({"batch_size": "8", "q_len": "4", "kv_len": "4096"}, {"tree": "topk:2"})
    rec = recommend(s, tree, SGLANG)
    by = {r.setting.id: r for r in rec.results}
    assert by["flashinfer"].total_us is not None and rec.spec.topk == 2
    assert by["trtllm_mha"].total_us is None and "refused by the engine" in by["trtllm_mha"].unpriced
    assert "trtllm_mha" not in rec.best.setting.flags
    with pytest.raises(BadInput, match="topk"):
        recommend(s, tree, SGLANG, settings=["trtllm_mha"])


def test_an_mla_run_is_priced_by_the_engines_mla_settings(tmp_path):
    mla = dict(heads=(16, 1, 576), attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128)
    s = load_source([write_run(tmp_path / "run", known_rows(qs=(1, 2, 4), **mla))])
    wl = from_options({"batch_size": "8", "q_len": "2", "kv_len": "4096"}, {})
    rec = recommend(s, wl, SGLANG, overlap="sum", layers={"verify": 61, "draft_extend": 1})
    by = {r.setting.id: r for r in rec.results}
    assert set(by) == {x.id for x in SGLANG.valid_on("sm90", "mla")} and all(i.startswith("mla:") for i in by)
    assert by["mla:flashmla"].kernels == {"verify": "sglang-flashmla", "draft_extend": "sglang-flashmla"}
    for i, routes in (("mla:flashmla", ("sglang-flashmla",) * 2), ("mla:flashinfer", ("sglang-fi-mla",
                                                                                       "sglang-fi-mla-extend")),
                      ("mla:fa3", ("sglang-fa3-mla",) * 2)):
        assert by[i].total_us == pytest.approx(batch_price(dict(zip(("verify", "draft_extend"), routes)), 8, 2, 4096,
                                                           {"verify": 61, "draft_extend": 1}, "sum"))
    assert by["mla:fa3"].default  # FA3 absorbed MLA, priced from its route
    assert rec.best.setting.id == "mla:flashmla" and "--page-size 64" in render_command(rec)
    rec = recommend(s, wl, VLLM)
    assert {r.setting.id: r for r in rec.results}["mla:FLASHMLA"].priced_low == ["verify", "draft_extend"]
    # an MLA setting named on a GQA run, or a GQA one on an MLA run: one line
    with pytest.raises(BadInput, match="is for GQA models and the workload's group is MLA"):
        recommend(s, wl, SGLANG, settings=["trtllm_mha"])
    g = load_source([known_run(tmp_path / "gqa")])
    with pytest.raises(BadInput, match="is for MLA models and the workload's group is GQA"):
        recommend(g, from_options({"batch_size": "8", "q_len": "2", "kv_len": "4096"}, {}), SGLANG,
                  settings=["mla:flashmla"])


def test_one_markdown_table_writer_and_no_cell_breaks_its_table():
    # report, gate, recommend and recommend's check write their tables through one helper: a pipe or a newline in
    # a value (a reason, a flag, a server's answer) stays inside its cell
    import re

    from kbench.gate import markdown as gate_md
    from kbench.recommend import check, render
    from kbench.report.markdown import cell, table

    assert render.md_table is table and check.md_table is table
    assert all(gate_md._cell(x) == cell(x) for x in ("a | b\nc", "x", 3))  # the gate's delegates (a lazy import)
    lines = table(["kernel", "why"], [["fa2", "a | b\nc"], ["x", "y"]])
    assert lines[0] == "| kernel | why |" and lines[1] == "|---|---|" and len(lines) == 4
    assert all(len(re.findall(r"(?<!\\)\|", ln)) == 3 for ln in lines)
    assert lines[2] == "| fa2 | a \\| b c |"


def test_recommend_never_writes_over_its_workload_and_json_and_markdown_do_not_share_stdout(tmp_path):
    wl = tmp_path / "wl.jsonl"
    wl.write_text('{"batch_size": 16, "q_len": 4, "kv_len": 4096}\n')
    base = "results/baselines/h200-draft-extend-kv4096"
    r = recommend_cli(base, "--engine", "sglang", "--workload", wl, "--markdown", wl)
    assert r.exit_code == 2 and "writing there would replace what the command reads" in r.output, r.output
    assert wl.read_text() == '{"batch_size": 16, "q_len": 4, "kv_len": 4096}\n'
    r = recommend_cli(base, "--engine", "sglang", "--workload", wl, "--json", "--markdown", "-")
    assert r.exit_code == 2 and "give --markdown a file" in r.output


def test_the_recommend_aa_benchmark_says_whether_two_runs_give_the_same_answer(tmp_path):
    """benchmarks/recommend_aa.py: the committed H100 route baselines agree (vLLM, bs 16); a run where FLASH_ATTN's
    route is 3x slower gives another answer, which it reports (exit 1)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = [sys.executable, str(root / "benchmarks" / "recommend_aa.py")]
    base = root / "results" / "baselines"
    narrow = ["--engines", "vllm", "--batch-size", "16", "--q-len", "4", "--page-size", "64"]
    r = subprocess.run([*script, base / "h100-engine-routes-page1-64-kv4096", base / "h100-engine-routes-page1-64-kv4096-r2",
                        *narrow], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "answers: 1 of 1 the same" in r.stdout and "moved by: median" in r.stdout
    rows = known_rows(bss=(8,), qs=(4,), kvs=(4096,), page_size=64)
    slow = known_rows(bss=(8,), qs=(4,), kvs=(4096,), page_size=64)
    for x in slow:
        if x.kernel == "vllm-flash-attn":
            x.median_us *= 3
    a, b = known_run(tmp_path / "a", rows), known_run(tmp_path / "b", slow)
    r = subprocess.run([*script, a, b, "--engines", "vllm", "--batch-size", "8", "--q-len", "4", "--page-size", "64"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "answers: 0 of 1 the same" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([*script, a, tmp_path / "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: ")
