"""The YAML reader: duplicate keys refused, and the catalog parse cache keyed by content."""

import json

import pytest

from planner.errors import PlannerInputError
from planner.yamlfile import load_yaml_cached, parse_yaml


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(folder))
    return folder


def test_duplicate_keys_are_refused():
    with pytest.raises(PlannerInputError, match="duplicate key 'a'"):
        parse_yaml("a: 1\na: 2\n", "x.yaml")


def test_the_second_read_comes_from_the_json_copy(tmp_path, cache):
    source = tmp_path / "c.yaml"
    source.write_text("gpus:\n  - {name: a, memory_mib: 81559}\n")
    first = load_yaml_cached(source, "catalog c.yaml")
    copies = list(cache.glob("yaml-*.json"))
    assert len(copies) == 1 and json.loads(copies[0].read_text()) == first
    copies[0].write_text(json.dumps({"gpus": [{"name": "from-cache"}]}))  # prove the copy is what is read
    assert load_yaml_cached(source, "catalog c.yaml") == {"gpus": [{"name": "from-cache"}]}


def test_an_edited_file_is_parsed_again(tmp_path, cache):
    source = tmp_path / "c.yaml"
    source.write_text("a: 1\n")
    assert load_yaml_cached(source, "c") == {"a": 1}
    source.write_text("a: 2\n")
    assert load_yaml_cached(source, "c") == {"a": 2}
    assert len(list(cache.glob("yaml-*.json"))) == 2


def test_a_damaged_copy_is_replaced(tmp_path, cache):
    source = tmp_path / "c.yaml"
    source.write_text("a: [1, 2]\n")
    load_yaml_cached(source, "c")
    (copy,) = cache.glob("yaml-*.json")
    copy.write_text("{not json")
    assert load_yaml_cached(source, "c") == {"a": [1, 2]}
    assert json.loads(copy.read_text()) == {"a": [1, 2]}


def test_documents_json_would_change_are_not_cached(tmp_path, cache):
    source = tmp_path / "c.yaml"
    source.write_text("1: one\nday: 2025-06-01\n")
    data = load_yaml_cached(source, "c")
    assert data[1] == "one" and str(data["day"]) == "2025-06-01"
    assert not list(cache.glob("yaml-*.json"))


def test_integer_keys_come_back_as_integers_from_the_copy(tmp_path, cache):
    source = tmp_path / "c.yaml"
    source.write_text("mib:\n  value: {2: 2115, 4: 2181}\nnames: {a: 1}\n")  # engine_profiles.yaml's shape
    first = load_yaml_cached(source, "c")
    assert first == {"mib": {"value": {2: 2115, 4: 2181}}, "names": {"a": 1}}
    (copy,) = cache.glob("yaml-*.json")  # cached, where JSON alone would have turned 2 into "2"
    again = load_yaml_cached(source, "c")
    assert again == first and list(again["mib"]["value"]) == [2, 4]


def test_a_cache_folder_that_cannot_be_made_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(blocker / "cache"))  # a folder inside a file: mkdir fails, even as root
    source = tmp_path / "c.yaml"
    source.write_text("a: 1\n")
    assert load_yaml_cached(source, "c") == {"a": 1}
    assert not list(tmp_path.glob(".yaml-*"))


def test_a_copy_in_another_cache_format_is_never_read(tmp_path, cache):
    """One cache folder serves every installed planner: a copy an older version wrote for the same bytes (here
    with JSON's string keys) must not be read back as this version's."""
    import hashlib

    source = tmp_path / "c.yaml"
    source.write_text("value: {2: 2115}\n")
    older = cache / f"yaml-{hashlib.sha256(source.read_bytes()).hexdigest()}.json"
    older.parent.mkdir(parents=True, exist_ok=True)
    older.write_text('{"value": {"2": 2115}}')
    assert load_yaml_cached(source, "c") == {"value": {2: 2115}}
