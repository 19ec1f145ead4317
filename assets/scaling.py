"""DS2 scaling plans and the configuration of the bundled streams."""

from dagster_reconf.scaling_assets import build_scaling_assets
from resources.streams import STREAM_NAMES

# Plans here keep the state partitions: applying a plan restarts the stream, which
# cannot move state. Cores are aligned to divisors of the state partitions instead.
SCALING = build_scaling_assets(streams=STREAM_NAMES, policy="ds2", policy_config={"allow_state_migration": False})
ds2_plans = SCALING.plans
stream_configuration = SCALING.configuration
