"""Reading YAML: one safe loader for every file planner reads, and a parse cache for the shipped catalogs.

The loader is PyYAML's safe loader (libyaml's when PyYAML has it: it refuses deep nesting at once,
where the pure-Python scanner spends quadratic time on a long run of "[" before Python's recursion
limit stops it), refusing duplicate keys (the second would silently win).

Catalog files are parsed once per content: the parsed document is kept as JSON under the user's cache
folder, named by the BLAKE2b hash (256 bits) of the YAML bytes, so an edited catalog is parsed again and a stale entry
can never be read. JSON, not pickle: a cache file is data, never code. Measured on this project's
catalogs (bench/cli_speed.py): libyaml parses them in about 0.1 s, the JSON copy loads in about 2 ms.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import PlannerInputError

try:  # CPython's own BLAKE2 (hashlib's blake2b): hashlib itself loads OpenSSL first (python -X importtime: 3.5 ms,
    # against 0.4 ms), and BLAKE2b hashes the catalogs three times faster than CPython's own SHA-256 (0.2 ms for
    # models.yaml's 160 kB, against 0.7 ms)
    from _blake2 import blake2b
except ImportError:  # a Python without it
    from hashlib import blake2b

if TYPE_CHECKING:
    import yaml

CACHE_ENV = "PLANNER_CACHE_DIR"
# The JSON form of a parsed catalog and the hash naming its copy, named in the copy's file name: raise it whenever
# either changes, so a copy another planner version wrote (one cache directory serves every installed version)
# is never read
CACHE_FORMAT = 3


def _unique_key_loader() -> type:
    """The safe loader (libyaml's when PyYAML has it), refusing duplicate keys; PyYAML loads here, on the first
    parse: a catalog read from its JSON copy never needs it."""
    import yaml

    class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        """The safe loader, refusing duplicate keys."""

    _UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    return _UniqueKeyLoader


def __getattr__(name: str) -> Any:
    if name == "_UniqueKeyLoader":  # defined on first use, then a plain module attribute
        globals()[name] = _unique_key_loader()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    import yaml

    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


def printable(text: str) -> str:
    """Text as it may appear inside a one-line message: quoted and escaped if it holds a newline or the like."""
    return text if text.isprintable() else repr(text)


def parse_yaml(text: str, label: str) -> Any:
    """Parse one YAML document; any problem becomes a one-line error starting with `label`."""
    import yaml

    loader = sys.modules[__name__]._UniqueKeyLoader  # through the module: defined on first use, or replaced by a test
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlannerInputError(f"{label}: invalid YAML{where}: {printable(problem)}") from None
    except RecursionError:
        raise PlannerInputError(f"{label}: invalid YAML: nested too deeply") from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        # PyYAML's constructors fail this way on explicit tags with bad values (!!int nope, !!bool maybe,
        # !!timestamp never) and on integers past Python's digit limit
        raise PlannerInputError(f"{label}: invalid YAML: {exc.__class__.__name__}: {printable(str(exc))}") from None


def cache_dir() -> Path:
    """$PLANNER_CACHE_DIR, else $XDG_CACHE_HOME/planner, else ~/.cache/planner."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "planner"


def load_yaml_cached(path: Path, label: str) -> Any:
    """Parse a catalog file, through the JSON copy of its content when one exists."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PlannerInputError(f"{label}: cannot read it ({exc.strerror}); reinstall planner") from None
    cached = cache_dir() / f"yaml-v{CACHE_FORMAT}-{blake2b(raw, digest_size=32).hexdigest()}.json"
    try:
        return json.loads(cached.read_text(encoding="utf-8"), object_hook=_from_json)
    except (OSError, ValueError):
        pass  # no copy yet, or an unreadable one: parse the YAML and (re)write it
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerInputError(f"{label}: not UTF-8 text") from None
    data = parse_yaml(text, label)
    _write_cache(cached, data)
    return data


# A mapping with keys JSON has no object for (integers: engine_profiles.yaml's {2: 2115, 4: 2181}) is kept as
# its [key, value] pairs under this one key, which no YAML document planner reads uses (the round trip checks it)
_PAIRS = "\x00yaml-pairs"


def _to_json(data: Any) -> Any:
    if isinstance(data, dict):
        if all(isinstance(key, str) for key in data):
            return {key: _to_json(value) for key, value in data.items()}
        return {_PAIRS: [[key, _to_json(value)] for key, value in data.items()]}
    if isinstance(data, list):
        return [_to_json(value) for value in data]
    return data


def _from_json(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _PAIRS in obj:
        return {key: value for key, value in obj[_PAIRS]}
    return obj


def _write_cache(path: Path, data: Any) -> None:
    """Best effort: a read-only home, or a document JSON would not give back as it is (dates, a list as a key),
    just means no cache."""
    import tempfile  # a copy is written once per catalog content

    try:
        text = json.dumps(_to_json(data))
        if json.loads(text, object_hook=_from_json) != data:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".yaml-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError):
        return
