"""Every export of every shipped scenario through the real checks that install offline.

SkyPilot: `sky.Task.from_yaml` and the cloud's own feature check (skipped when skypilot is not
installed). Kubernetes: the LeaderWorkerSet v1 CRD schema (tests/data/lws-v1-schema.json.gz, strict:
no unknown fields), whose pod template schema also checks a Deployment's pod template. vLLM, SGLang and
llama.cpp argument parsers are too heavy to install here: commands are checked against the flag record
tests/data/engine-args.yaml. Fleet scenarios export every assignment (Kubernetes: one document each;
SkyPilot: one task per assignment, --assignment N).
"""

import copy
import gzip
import json
import shlex
from pathlib import Path

import pytest
import yaml

from planner import api, solve
from planner.catalog.load import load_catalog
from planner.catalog.skypilot import load_skypilot
from planner.errors import PlannerInputError
from planner.plan.scenario import load_scenario
from planner.render.export import TARGETS, export, load_plan
from planner.render.records import fleet_json, solve_json

ROOT = Path(__file__).parents[1]
DATA = Path(__file__).parent / "data"
ENGINE_ARGS = yaml.safe_load((DATA / "engine-args.yaml").read_text())
CATALOG = load_catalog()
COMMANDS = {"vllm": "vllm serve", "sglang": "python3 -m sglang.launch_server", "llamacpp": "llama-server"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{(scenario, plan index or assignment, target): text or the refusal} for every shipped scenario: the best
    plan and each alternative of a single-configuration scenario, each assignment of a fleet."""
    out = {}
    folder = tmp_path_factory.mktemp("plans")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        plan_file = folder / f"{path.stem}.json"
        if scenario.is_fleet:
            plan_file.write_text(fleet_json(api.plan_fleet(scenario, catalog=CATALOG), scenario.name or path.stem))
            plans = [(f"assignment {i}", plan) for i, plan in enumerate(api.export_plans(plan_file, catalog=CATALOG))]
        else:
            result = solve(scenario)
            plan_file.write_text(solve_json(result))
            count = len(result.alternatives) + (1 if result.best else 0)
            plans = [(index, load_plan(plan_file, CATALOG, index)) for index in range(count)]
        for index, plan in plans:
            for target in TARGETS:
                try:
                    out[(path.stem, index, target)] = export(plan, target)
                except PlannerInputError as refusal:
                    out[(path.stem, index, target)] = refusal
    return out


def _texts(exports, target):
    return {key: text for key, text in exports.items() if key[2] == target and isinstance(text, str)}


def test_every_export_is_written_or_refused_with_one_line(exports):
    written = [k for k, v in exports.items() if isinstance(v, str)]
    refused = {k: str(v) for k, v in exports.items() if not isinstance(v, str)}
    print(f"\n{len(exports)} exports: {len(written)} written, {len(refused)} refused")
    for key, reason in sorted(refused.items(), key=str):
        print("  refused", key, reason[:110])
    assert len(written) >= 40
    assert all("\n" not in reason and reason.startswith(("--to ", "--checkpoint")) for reason in refused.values())


@pytest.mark.parametrize("target", ["vllm", "sglang", "llamacpp"])
def test_engine_commands_use_recorded_flags(exports, target):
    record = ENGINE_ARGS[target]
    allowed = set(record["value_flags"]) | set(record.get("switch_flags", ()))
    texts = _texts(exports, target)
    if target == "vllm":  # the SkyPilot run scripts and Kubernetes commands carry vLLM lines too
        texts.update({k: yaml.safe_load(v)["run"] for k, v in _texts(exports, "skypilot").items()})
    checked = 0
    for text in texts.values():
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith(COMMANDS[target]):
                continue
            argv = shlex.split(line)[len(COMMANDS[target].split()):]
            flags = {token for token in argv if token.startswith("--")}
            assert flags <= allowed, flags - allowed
            checked += 1
    assert checked >= 5 or target == "llamacpp"


def _strict(schema):
    """Kubernetes prunes unknown fields silently; a typo in an export should fail instead."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@pytest.fixture(scope="module")
def schemas():
    jsonschema = pytest.importorskip("jsonschema")
    lws = _strict(json.loads(gzip.decompress((DATA / "lws-v1-schema.json.gz").read_bytes())))
    pod_template = copy.deepcopy(lws["properties"]["spec"]["properties"]["leaderWorkerTemplate"]["properties"]["workerTemplate"])
    # apps/v1 Deployment (Kubernetes API reference): the fields an export writes; the pod template is the real schema
    deployment = {
        "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "apps/v1"}, "kind": {"const": "Deployment"},
            "metadata": {"type": "object", "additionalProperties": False, "required": ["name"],
                         "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                                        "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "additionalProperties": False, "required": ["selector", "template"],
                     "properties": {"replicas": {"type": "integer", "minimum": 0},
                                    "selector": {"type": "object", "properties": {"matchLabels": {
                                        "type": "object", "additionalProperties": {"type": "string"}}}},
                                    "template": pod_template}}}}
    return jsonschema, {"Deployment": deployment, "LeaderWorkerSet": lws}


def test_kubernetes_exports_validate_against_the_schemas(exports, schemas):
    jsonschema, by_kind = schemas
    kinds = []
    for text in _texts(exports, "kubernetes").values():
        doc = yaml.safe_load(text)
        jsonschema.validate(doc, by_kind[doc["kind"]])
        if doc["kind"] == "Deployment":
            assert doc["spec"]["selector"]["matchLabels"].items() <= doc["spec"]["template"]["metadata"]["labels"].items()
        kinds.append(doc["kind"])
    print(f"\nkubernetes: {kinds.count('Deployment')} Deployments, {kinds.count('LeaderWorkerSet')} LeaderWorkerSets valid")
    assert "Deployment" in kinds and "LeaderWorkerSet" in kinds


def test_the_schema_check_catches_a_misspelt_field(exports, schemas):
    jsonschema, by_kind = schemas
    doc = yaml.safe_load(next(iter(_texts(exports, "kubernetes").values())))
    doc["spec"]["template"]["spec"]["containers"][0]["resource"] = doc["spec"]["template"]["spec"]["containers"][0].pop("resources")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, by_kind[doc["kind"]])


def test_skypilot_exports_load_and_pass_the_clouds_feature_check(exports, tmp_path):
    sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install skypilot)")
    checked = 0
    for (scenario, index, _), text in _texts(exports, "skypilot").items():
        path = tmp_path / f"{scenario}-{index}.yaml".replace(" ", "-")
        path.write_text(text)
        task = sky.Task.from_yaml(str(path))
        for resources in task.resources:
            if resources.cloud is not None:
                needed = task.get_required_cloud_features() | resources.get_required_cloud_features()
                resources.cloud.check_features_are_supported(resources, needed)
            checked += 1
    print(f"\nskypilot: {checked} tasks loaded by sky.Task.from_yaml and feature-checked")
    assert checked >= 10


def test_skypilot_feature_table_matches_skypilot():
    pytest.importorskip("sky", reason="skypilot is not installed (pip install skypilot)")
    from sky import clouds
    from sky.utils import registry

    features = {"multi_node": clouds.CloudImplementationFeatures.MULTI_NODE,
                "spot_instance": clouds.CloudImplementationFeatures.SPOT_INSTANCE,
                "open_ports": clouds.CloudImplementationFeatures.OPEN_PORTS}
    for name, cloud in load_skypilot().clouds.items():
        unsupported = getattr(registry.CLOUD_REGISTRY.from_str(name), "_CLOUD_UNSUPPORTED_FEATURES", {})
        for field, feature in features.items():
            assert getattr(cloud.features, field) == (feature not in unsupported), (name, field)
