"""The engine registry: every list of engines reads catalogs/engine_profiles.yaml and the engine modules."""

import re
import shutil
from pathlib import Path

import pytest
import yaml

from planner.catalog.load import catalog_dir
from planner.errors import PlannerInputError
from planner.estimator.engines import registry
from planner.estimator.engines.profiles import PROFILES_FILE, load_profiles

README = Path(__file__).parents[1] / "README.md"


def _catalog_engines():
    data = yaml.safe_load((catalog_dir() / PROFILES_FILE).read_text())
    return [key for key in data if key not in ("schema_version", "cuda")]


def test_the_engines_are_the_catalog_entries_in_file_order_after_the_planning_margin():
    assert registry.profiled_engines() == tuple(_catalog_engines())
    assert registry.engine_names() == ("simple", *_catalog_engines())
    assert registry.engine_names()[:4] == ("simple", "vllm", "sglang", "llamacpp")
    assert registry.export_targets() == (*_catalog_engines(), "skypilot", "kubernetes")


@pytest.mark.parametrize("name", ["simple", "vllm", "sglang", "llamacpp"])
def test_each_engine_module_describes_itself_under_its_own_name(name):
    described = registry.engine(name)
    assert described.name == name
    assert (described.profile is None) == (name == "simple")


def test_what_the_modules_say_is_what_planner_did_before_the_registry():
    vllm, sglang, llamacpp, simple = (registry.engine(n) for n in ("vllm", "sglang", "llamacpp", "simple"))
    assert (vllm.workspace, sglang.workspace, llamacpp.workspace) == ("remainder", "outside", "measured")
    assert [e.name for e in (vllm, sglang, llamacpp, simple) if e.scheduler_caps_sequences] == ["vllm"]
    assert [e.name for e in (vllm, sglang, llamacpp, simple) if e.cache_sized_by_batch] == ["llamacpp"]
    assert [e.name for e in (vllm, sglang, llamacpp, simple) if not e.tensor_parallel] == ["llamacpp"]
    assert sglang.fraction_field == "mem_fraction_static" and vllm.fraction_field == "gpu_memory_utilization"
    # the flag values export passes: vLLM/SGLang run "auto" for a dtype they have no name for, llama.cpp has none
    assert [vllm.kv_cache_dtype("fp8"), sglang.kv_cache_dtype("fp8"), llamacpp.kv_cache_dtype("fp8")] == [
        "fp8", "fp8_e4m3", "q8_0"]
    assert [vllm.kv_cache_dtype("bf16"), sglang.kv_cache_dtype("bf16"), llamacpp.kv_cache_dtype("int4")] == [
        "auto", "auto", None]


def test_labels_aliases_and_versions_come_from_the_catalog():
    assert [registry.label(n) for n in ("vllm", "sglang", "llamacpp")] == ["vLLM", "SGLang", "llama.cpp"]
    assert registry.canonical("llama.cpp") == registry.canonical(" LLAMA-CPP ") == "llamacpp"
    assert registry.canonical("vllm") == "vllm" and registry.canonical("tgi") == "tgi"
    assert registry.versions_help().startswith(
        "vLLM 0.34.0 or 0.19.0, SGLang 0.5.23 or 0.5.19 or 0.5.16 or 0.5.15 or 0.5.13 or 0.5.12 or 0.5.10 or 0.5.9, llama.cpp b7400")
    assert load_profiles().versions("llamacpp").aliases == ("llama.cpp", "llama-cpp")


def test_an_unknown_engine_is_one_line_naming_them_all():
    with pytest.raises(PlannerInputError, match=r"^--engine: unknown engine 'tgi'; use one of simple, vllm, sglang, "
                                                r"llamacpp"):
        registry.engine("tgi")


@pytest.fixture
def tgi_in_the_catalog(monkeypatch):
    """A catalog naming one more engine, tgi; the registry's modules looked up afresh, and again afterwards."""
    monkeypatch.setattr(registry, "profiled_engines", lambda: ("vllm", "tgi"))
    registry._module_engine.cache_clear()
    yield monkeypatch
    registry._module_engine.cache_clear()


def test_a_catalog_engine_without_its_module_is_one_line(tgi_in_the_catalog):
    with pytest.raises(PlannerInputError, match=r"^catalog engine_profiles.yaml: tgi has no module "
                                                r"planner/estimator/engines/tgi.py; remove the entry or add the module$"):
        registry.engine("tgi")


def test_an_engine_module_without_a_profile_or_a_command_is_one_line(tgi_in_the_catalog):
    from types import SimpleNamespace

    described = registry.Engine("tgi", budget=print, profile=dict)  # no export command
    tgi_in_the_catalog.setattr(registry, "import_module", lambda name: SimpleNamespace(ENGINE=described))
    with pytest.raises(PlannerInputError, match=r"^planner/estimator/engines/tgi.py: its ENGINE needs a profile "
                                                r"schema and an export command"):
        registry.engine("tgi")


def test_an_entry_the_engine_profile_does_not_know_is_refused(tmp_path):
    shutil.copytree(catalog_dir(), tmp_path / "c", ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    path = tmp_path / "c" / PROFILES_FILE
    data = yaml.safe_load(path.read_text())
    data["sglang"]["versions"]["0.5.9"]["block_size"] = {"value": 16, "source": "not an SGLang constant"}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlannerInputError, match=r"^catalog engine_profiles.yaml.sglang.versions.0.5.\d+.block_size: "
                                                r"Extra inputs are not permitted$"):
        load_profiles(str(tmp_path / "c"))


def test_the_command_line_and_the_schemas_offer_the_registry(capsys):
    from planner import cli
    from planner.plan.scenario import EngineSpec
    from planner.render.export import TARGETS
    from planner.serve.app import EstimateBody, ExportBody, PerfBody

    assert [e.value for e in cli.EngineName] == list(registry.engine_names())
    assert [e.value for e in cli.ExportTarget] == list(TARGETS) == list(registry.export_targets())
    assert set(EngineSpec.model_fields["name"].annotation.__args__) == set(registry.engine_names())
    assert EstimateBody.model_fields["engine"].annotation.__args__ == registry.engine_names()
    assert PerfBody.model_fields["engine"].annotation.__args__ == registry.profiled_engines()
    assert ExportBody.model_fields["target"].annotation.__args__ == registry.export_targets()


def test_the_web_pages_list_each_engine_with_its_default_release():
    from planner.serve.app import engine_options

    page = engine_options('<select><!--engine budgets--></select><select><!--engine commands--></select>')
    assert page.startswith('<select><option value="vllm">vLLM 0.34.0 budget</option><option value="sglang">SGLang '
                           '0.5.23 budget</option><option value="llamacpp">llama.cpp b7400 budget</option>')
    assert '<select><!--' not in page and '<option value="llamacpp">llama.cpp command</option>' in page
    assert page.count("<option") == 2 * len(registry.profiled_engines())


def test_the_readme_table_of_engine_versions_lists_every_engine():
    table = README.read_text().split("#### Engine versions")[1].split("\n\n")[1]
    rows = {cells[0]: cells for cells in (re.split(r"\s*\|\s*", line.strip("| ")) for line in table.splitlines()[2:])}
    profiles = load_profiles()
    assert list(rows) == [registry.label(name) for name in registry.profiled_engines()]
    for name in registry.profiled_engines():
        versions = profiles.versions(name)
        assert rows[registry.label(name)][2] == versions.default
        assert all(version in rows[registry.label(name)][1] for version in versions.versions)


def test_perf_takes_an_engine_alias_for_its_budget_too(catalog):
    from planner import api

    by_alias = api.perf("llama-3.1-8b", gpu="h100-sxm", engine="llama.cpp", rate=0.5, precision="q4_k_m",
                        catalog=catalog)
    by_name = api.perf("llama-3.1-8b", gpu="h100-sxm", engine="llamacpp", rate=0.5, precision="q4_k_m",
                       catalog=catalog)
    assert by_alias.steady == by_name.steady
