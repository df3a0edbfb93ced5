"""The names of disaggregated serving (planner.plan.disaggregated): the serving modes a scenario's search.serving
lists and the role a fleet replica plays. Apart from that module so that the plan-file schema (planner.plan.planfile),
which `planner export` loads, does not load the capacity model."""

AGGREGATED, DISAGGREGATED = "aggregated", "disaggregated"
SERVING_MODES = (AGGREGATED, DISAGGREGATED)
BOTH, PREFILL, DECODE = "both", "prefill", "decode"  # an aggregated replica; one of a disaggregated pair
ROLES = (BOTH, PREFILL, DECODE)

__all__ = ["AGGREGATED", "BOTH", "DECODE", "DISAGGREGATED", "PREFILL", "ROLES", "SERVING_MODES"]
