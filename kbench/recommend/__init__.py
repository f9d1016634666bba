"""`kbench recommend` and `kbench export`: from a run's measurements (or a policy) and a workload to the engine
flags to set, and the policy as a standalone selector an engine can route with (no click here).

A layer above report (it reads policies and runs through kbench.report) and a peer of gate; the CLI composes
the two for the A/B check. The table of engine settings is engines.toml, read by kbench.recommend.settings.
"""


def recommend_for(sources, engine: str, *, batch_size=None, q_len=None, kv_len=None, workload=None,
                  filters: dict | None = None, steps=None, engine_version: str | None = None, **options):
    """`kbench recommend` from Python: the Recommendation (kbench.recommend.price) for a workload.

        from kbench.recommend import recommend_for
        from kbench.recommend.render import to_json, to_markdown
        rec = recommend_for("results/baselines/h200-draft-extend-kv4096", "sglang", batch_size=16, q_len=4,
                            kv_len=4096)
        rec.best.setting.flags, to_json(rec)

    sources: a run folder, a policy file, or a list of them (as the command's RUN_OR_POLICY). The workload:
    batch_size/q_len/kv_len (numbers, or the options' texts: '1@3,8', 'lognormal:4096:1.0') with `filters` (group
    filters: {'power': 'sustained'}) and `steps` (default both: verify and draft extend), or `workload`, a JSON Lines
    file (schemas/workload.schema.json). options: recommend()'s (settings, flashinfer, layers, max_extrapolation,
    gpu, top). BadInput for anything the command refuses."""
    from kbench.errors import BadInput
    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.settings import STEPS, load_table
    from kbench.recommend.workload import from_options, read_workload

    eng = load_table().engine(engine, engine_version)
    steps = (steps,) if isinstance(steps, str) else steps
    if steps is not None and (not isinstance(steps, (list, tuple)) or not steps or any(s not in STEPS for s in steps)):
        raise BadInput(f"steps {steps!r}: one or more of {', '.join(STEPS)}")
    if filters is not None and not isinstance(filters, dict):
        raise BadInput(f"filters {filters!r}: a dict of group filters, e.g. {{'power': 'sustained'}}")
    shape = {"batch_size": batch_size, "q_len": q_len, "kv_len": kv_len}
    if workload is not None:
        if any(v is not None for v in shape.values()) or filters:
            raise BadInput("recommend_for: give the workload one way: workload=FILE, or the shape and filters")
        wl = read_workload(workload)
    else:
        wl = from_options({k: None if v is None else str(v) for k, v in shape.items()},
                          {k: None if v is None else str(v) for k, v in (filters or {}).items()},
                          tuple(steps or STEPS))
    return recommend(load_source(sources), wl, eng, **options)
