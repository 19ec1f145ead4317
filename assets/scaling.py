"""DS2 scaling plans and the configuration of the bundled streams."""

from dagster_reconf import build_scaling_assets
from resources.streams import STREAM_NAMES

# Plans may move state: stream_configuration migrates it (Spark's offline repartition,
# verified, journaled in the audit ledger) when a plan changes the state partitions.
POLICY_CONFIG = {"allow_state_migration": True}
SCALING = build_scaling_assets(streams=STREAM_NAMES, policy="ds2", policy_config=POLICY_CONFIG)
ds2_plans = SCALING.plans
stream_configuration = SCALING.configuration
