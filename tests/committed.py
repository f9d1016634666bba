"""The baselines committed under results/baselines/, by name. Tests read these and nothing else of that folder: a
baseline a user makes there and does not commit must not fail kbench's tests (test_manifest_file checks this list
against git). Standard library only: tests/readme_baselines.py imports it without kbench installed."""
COMMITTED_BASELINES = ("h100-deepseek-mtp-kv4096-32768", "h100-deepseek-mtp-tp8-kv4096-32768", "h100-draft-decode-kv4096", "h100-eagle-tree-kv4096",
                       "h100-engine-routes-eager-kv4096", "h100-engine-routes-kv4096", "h100-engine-routes-page1-64-kv4096",
                       "h100-engine-routes-page1-64-kv4096-r2", "h100-fa3-draft-extend-kv4096",
                       "h100-fa3-draft-kv4096", "h100-gpt-oss-routes-kv4096", "h100-layers-deepseek-v3",
                       "h100-layers-gpt-oss", "h100-layers-llama3-8b", "h100-layers-qwen3-30b-a3b",
                       "h200-draft-extend-adaptive-kv512-4096-32768",
                       "h200-draft-extend-full-kv512-4096-32768", "h200-draft-extend-kv4096",
                       "h200-power-both-kv4096-sweep1", "h200-power-both-kv4096-sweep2")
