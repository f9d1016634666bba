"""The campaign's steps, one module per theme; importing this package registers them (campaign.step)."""
from campaign_steps import machine, sweeps, studies, features, gate_alarms  # noqa: F401
