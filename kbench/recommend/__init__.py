"""`kbench recommend` and `kbench export`: from a run's measurements (or a policy) and a workload to the engine
flags to set, and the policy as a standalone selector an engine can route with (no click here).

A layer above report (it reads policies and runs through kbench.report) and a peer of gate; the CLI composes
the two for the A/B check. The table of engine settings is engines.toml, read by kbench.recommend.settings.
"""
