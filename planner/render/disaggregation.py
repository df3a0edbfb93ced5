"""What `planner export` writes for a replica of a disaggregated prefill/decode pair (planner.plan.disaggregated):
the engine's flags for its role and the router a deployment puts in front of the two pools.

SGLang @ v0.5.23 (sglang/srt/arg_groups/fields/disagg.py): --disaggregation-mode null|prefill|decode and
--disaggregation-transfer-backend (choices arg_groups/choices.py DISAGG_TRANSFER_BACKEND_CHOICES: mooncake, nixl,
ascend, fake, mori, mooncake_tcp; default mooncake, written out so the launch says what moves the KV); the decode
server's radix cache is off by default (disaggregation_decode_enable_radix_cache = False), as the plan sizes it.
vLLM @ v0.34.0: --kv-transfer-config (engine/arg_utils.py) with KVTransferConfig's kv_connector "NixlConnector" and
kv_role kv_producer (prefill) or kv_consumer (decode): NixlConnector warns that kv_both is deprecated and asks for
those two (distributed/kv_transfer/kv_connector/v1/nixl/connector.py).
"""

from __future__ import annotations

import json

from planner.errors import PlannerInputError
from planner.plan.roles import BOTH, PREFILL

SGLANG_TRANSFER_BACKEND = "mooncake"  # SGLang's default backend (fields/disagg.py), RDMA over the nodes' NICs
VLLM_CONNECTOR = "NixlConnector"
VLLM_KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
ENGINES = ("vllm", "sglang")


def role_args(engine: str, role: str) -> list[str]:
    """The engine flags of a replica's role (none for an aggregated replica); a one-line error for an engine planner
    writes no disaggregated launch for."""
    if role == BOTH:
        return []
    if engine == "sglang":
        return ["--disaggregation-mode", role, "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND]
    if engine == "vllm":
        config = {"kv_connector": VLLM_CONNECTOR, "kv_role": VLLM_KV_ROLES[role]}
        return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]
    raise PlannerInputError(f"--to {engine}: the plan's {role} replica is one of a disaggregated prefill/decode pair, "
                            f"which planner exports for {' and '.join(ENGINES)} only; export --to vllm or --to sglang")


def router_note(engine: str, role: str) -> str | None:
    """What a deployment needs beside the pair's replicas: a router sending each request to a prefill replica, then
    to a decode replica with the prefill's KV handle."""
    if role == BOTH:
        return None
    first = "this prefill replica's KV goes to the decode pool" if role == PREFILL else \
        "this decode replica takes its prompts' KV from the prefill pool"
    if engine == "sglang":
        # the flags as SGLang 0.5.23's own test passes them (sglang/test/server_fixtures/disaggregation_fixture.py
        # launch_lb); sglang_router is its own package, whose source planner has not checked
        return (f"{first}; route requests through SGLang's router (pip install sglang-router): python3 -m "
                "sglang_router.launch_router --pd-disaggregation --prefill http://PREFILL:30000 --decode "
                "http://DECODE:30000 --host 0.0.0.0 --port 8000 (flags as SGLang 0.5.23's own PD test passes them); "
                "give each server its node's NICs with --disaggregation-ib-device")
    return (f"{first}; vLLM's wheel ships no router: send each request to a prefill replica with max_tokens 1 and "
            "kv_transfer_params {\"do_remote_decode\": true}, then to a decode replica with the kv_transfer_params it "
            "returns (the proxy of the vLLM repository's disaggregated-serving examples, or llm-d / NVIDIA Dynamo); "
            "planner has not checked a router")


__all__ = ["ENGINES", "role_args", "router_note"]
