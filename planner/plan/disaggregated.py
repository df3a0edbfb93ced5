"""Disaggregated prefill and decode (search.serving: disaggregated): a workload served by a prefill pool and a decode
pool, each its own GPU type, layout and count, the prompt's KV sent from one to the other over the nodes' network.

A prefill replica runs the engine on prompts only: a request is its prompt and its first token
(role_shape: Workload(P, 1)), its SLO the workload's TTFT less the KV transfer and the decode replica's share
(role_slos); TPOT does not apply. A decode replica receives requests whose prompt's KV was computed elsewhere
(Workload.prefilled): each holds its whole prompt and the tokens it generates in the pool (P + t, not a prefix
cached once), computes only its prompt's last token (vLLM recomputes it to sample; SGLang sends the first token
along) and then decodes; the TPOT SLO applies, and the TTFT it adds (the step under way when the request arrives,
then its own first step) must be within DECODE_TTFT_STEPS TPOT targets. So each role's capacity is the capacity
model's (planner.estimator.capacity) of its own shape and SLO, and CP-SAT may pair any prefill replica with any
decode replica: a request's TTFT is at most prefill TTFT + transfer + decode's share, within the workload's TTFT.

The KV transfer: each GPU of the prefill replica sends its shard of the prompt's KV (the estimator's per-GPU KV
bytes per token x P, the busiest GPU's) over its own NIC at the catalog's per-GPU network line rate
(catalogs/gpus.yaml `network`: HGX/DGX nodes have a 400 Gb/s ConnectX-7 per GPU). That figure is a whole node's,
so a disaggregated replica rents whole nodes only (on_network); GPUs without a sourced network figure serve
aggregated only. Separate pools are separate instances: the link is the network, never NVLink.

Not modelled: the line rate's protocol efficiency (no sourced figure: the transfer is a lower bound), the decode
side's NICs (a decode replica of fewer GPUs than its prefill replica receives over fewer NICs), the prefill pool
holding a request's KV until its transfer ends, overlap of transfer with prefill (layer by layer), the router's
own latency, and a prefix cache on either pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog.load import Catalog, Offer
from planner.errors import PlannerInputError
from planner.estimator.capacity import Slo
from planner.estimator.performance import Workload
from planner.plan.deadline import NO_DEADLINE, Deadline
from planner.plan.roles import AGGREGATED, BOTH, DECODE, DISAGGREGATED, PREFILL, ROLES, SERVING_MODES
from planner.plan.search import Candidate, SearchSpace, recheck
from planner.plan.serving import Bucket, FleetWorkload, ReplicaLayout, ServingConfig, most_capacity

# engines whose disaggregated serving planner exports (SGLang --disaggregation-mode, vLLM's NixlConnector)
ENGINES = ("vllm", "sglang")
# The TTFT a decode replica adds: the step under way when the transferred request arrives, then its own first step
# (its last prompt token beside the running decodes), each a decode step, which the TPOT target bounds.
DECODE_TTFT_STEPS = 2


@dataclass(frozen=True)
class KvTransfer:
    """One request's KV sent from a prefill replica to the decode pool."""

    prompt_tokens: int
    bytes_per_gpu: int  # the prefill replica's busiest GPU's shard of the prompt's KV
    gbps_per_gpu: float  # each GPU's NIC, decimal Gb/s (catalogs/gpus.yaml network)
    network: str

    @property
    def seconds(self) -> float:
        return self.bytes_per_gpu * 8 / (self.gbps_per_gpu * 1e9)


def kv_transfer(candidate: Candidate, space: SearchSpace, catalog: Catalog, prompt_tokens: int) -> KvTransfer | None:
    """The KV of one prompt of `prompt_tokens` on the candidate's layout, over its GPUs' NICs; None without a
    network figure for its GPU."""
    network = candidate.gpu.network
    if network is None:
        return None
    per_token = max(rank.kv_bytes_per_token for rank in recheck(candidate, space, catalog).per_gpu)
    return KvTransfer(prompt_tokens, per_token * prompt_tokens, network.gbps_per_gpu, network.name)


def role_shape(bucket: Bucket, role: str) -> Workload:
    """A bucket's request as a role's replica runs it: a prefill replica its prompt and first token, a decode replica
    the whole reply from a prompt computed elsewhere (each request holds the prompt's KV of its own)."""
    if role == PREFILL:
        return Workload(bucket.prompt_tokens, 1, bucket.shared_prefix_tokens)
    return Workload(bucket.prompt_tokens, bucket.output_tokens, prefilled=True)


def decode_slo(slo: Slo) -> Slo:
    """A decode replica's targets: the workload's TPOT, and its share of TTFT (DECODE_TTFT_STEPS TPOT targets)."""
    return Slo(DECODE_TTFT_STEPS * slo.tpot_s, slo.tpot_s, slo.percentile)


def prefill_slo(slo: Slo, transfer_s: float) -> Slo | None:
    """A prefill replica's TTFT target: the workload's, less the transfer and the decode replica's share; None when
    nothing is left."""
    ttft = slo.ttft_s - transfer_s - decode_slo(slo).ttft_s
    return Slo(ttft, None, slo.percentile) if ttft > 0 else None


def on_network(config: ServingConfig, offer: Offer) -> bool:
    """A replica may run on the offer: an aggregated one anywhere it fits, a disaggregated one on whole nodes, whose
    NICs the catalog's network figure counts."""
    return config.role == BOTH or offer.gpus >= config.candidate.gpu.gpus_per_node


def role_configs(workload: FleetWorkload, catalog: Catalog, layouts: list[ReplicaLayout],
                 deadline: Deadline = NO_DEADLINE) -> list[ServingConfig]:
    """Per bucket, role and replica size on each GPU type with a network figure: the configuration of most capacity
    within the role's SLO. Pairs run without speculative decoding: a decode pool's MTP cycles beside transferred
    prompts are not modelled (search.speculative's mtp applies to the aggregated replicas)."""
    sizes: dict[tuple[str, int], list[ReplicaLayout]] = {}
    for layout in layouts:
        if layout.candidate.gpu.network is not None and layout.candidate.configuration.speculation is None:
            sizes.setdefault((layout.candidate.gpu.name, layout.candidate.gpus), []).append(layout)
    configs = []
    for index, bucket in enumerate(workload.buckets):
        transfers: dict[int, KvTransfer] = {}

        def prefill(layout: ReplicaLayout) -> tuple[Slo, KvTransfer] | None:
            transfer = transfers.get(id(layout))
            if transfer is None:
                transfer = transfers[id(layout)] = kv_transfer(layout.candidate, workload.space, catalog,
                                                               bucket.prompt_tokens)
            slo = prefill_slo(workload.slo, transfer.seconds)
            return None if slo is None else (slo, transfer)

        def decode(layout: ReplicaLayout) -> tuple[Slo, None]:
            return decode_slo(workload.slo), None

        for role, role_of in ((PREFILL, prefill), (DECODE, decode)):
            shape = role_shape(bucket, role)
            found = [most_capacity(workload, index, shape, group, deadline, role, role_of) for group in sizes.values()]
            configs += sorted((c for c in found if c is not None), key=lambda c: -c.capacity_rps)
    return configs


def unserved_reason(workload: FleetWorkload, catalog: Catalog) -> str:
    """Why a bucket of a workload searched disaggregated only found no prefill/decode pair: what the mode needs of its
    GPUs and offers; empty when aggregated replicas were searched too."""
    if AGGREGATED in workload.serving:
        return ""
    networked = sorted(g.name for g in catalog.gpus if g.network is not None)
    return (f"; disaggregated replicas need a GPU with a node network figure in catalogs/gpus.yaml "
            f"({', '.join(networked)}) rented as whole nodes, and a prefill TTFT left after the transfer and "
            f"{DECODE_TTFT_STEPS} x tpot_s; add aggregated to search.serving")


def check_workload(name: str, engine: str, serving: tuple[str, ...], slo: Slo) -> None:
    """A one-line error where disaggregated serving cannot be planned."""
    if DISAGGREGATED not in serving:
        return
    if engine not in ENGINES:
        raise PlannerInputError(f"{name}: search.serving: disaggregated is planned for vllm and sglang (their "
                                f"prefill/decode launch flags), and engine.name is {engine}; set engine.name to "
                                "vllm or sglang, or remove disaggregated")
    if slo.ttft_s is None or slo.tpot_s is None:
        raise PlannerInputError(f"{name}: search.serving: disaggregated splits workload.slo.ttft_s between the prefill "
                                "pool, the KV transfer and the decode pool by tpot_s; give both ttft_s and tpot_s")


@dataclass(frozen=True)
class ServingChoice:
    """How the plan serves a workload's bucket, and what the workload would cost held to the other mode."""

    workload: str
    bucket: int
    mode: str  # aggregated or disaggregated
    ttft_s: float | None  # disaggregated: the slowest prefill TTFT + its KV transfer + the slowest decode share
    transfer_s: float | None  # disaggregated: the slowest prefill replica's KV transfer of one request
    transfer_bytes: int | None  # that replica's busiest GPU's shard of one prompt's KV
    other_mode: str | None  # None: search.serving allows one mode only
    other_usd_per_hour: float | None  # the fleet with the workload held to other_mode; None: see other_note
    other_note: str = ""  # why other_usd_per_hour is None: no fleet serves it so, or the time limit ran out


__all__ = ["AGGREGATED", "BOTH", "DECODE", "DECODE_TTFT_STEPS", "DISAGGREGATED", "ENGINES", "KvTransfer", "PREFILL",
           "ROLES", "SERVING_MODES", "ServingChoice", "check_workload", "decode_slo", "kv_transfer", "on_network",
           "prefill_slo", "role_configs", "role_shape", "unserved_reason"]
