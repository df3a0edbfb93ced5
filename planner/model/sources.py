"""Where a model comes from: the MODEL argument -> Architecture.

A catalog name or the Hugging Face id it lists; a config.json (or a folder holding one, with its
*.safetensors when present); a .gguf file; a Hugging Face repo id fetched from the Hub (config.json
and safetensors metadata only, cached, HF_HUB_OFFLINE respected); or a size given by flags.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from planner.model.architecture import (
    Architecture,
    UnsupportedArchitecture,
    architecture_from_config,
    architecture_from_size,
    load_config_file,
    size_only_architecture_from_config,
)
from planner.catalog.load import Catalog
from planner.errors import PlannerInputError

# planner.model.checkpoint (GGUF and safetensors readers, their records and struct) is imported where a .gguf
# file, a folder's weights files or the Hub's metadata is read: a catalog model never needs it (about 2.5 ms of
# every `planner estimate` otherwise, python -X importtime)
if TYPE_CHECKING:
    from planner.model.checkpoint import StoredWeights


def resolve_model(catalog: Catalog, model: str | None, params: int | None = None, layers: int | None = None,
                  kv_heads: int | None = None, head_dim: int | None = None,
                  heads: int | None = None) -> Architecture:
    """--params next to a model keeps the model's cache shape but takes the weight count from --params
    (the way to size an architecture planner cannot count tensor by tensor)."""
    shape_flags = {"--layers": layers, "--kv-heads": kv_heads, "--head-dim": head_dim}
    if model is None:
        if params is None:
            raise PlannerInputError("model: give a catalog name, a config.json path, or --params with --layers --kv-heads --head-dim")
        missing = [flag for flag, value in shape_flags.items() if value is None]
        if missing:
            raise PlannerInputError(f"{', '.join(missing)}: needed with --params to size the KV cache (e.g. --layers 32 --kv-heads 8 --head-dim 128)")
        return architecture_from_size(params, layers, kv_heads, head_dim, heads)  # type: ignore[arg-type]
    given = [flag for flag, value in shape_flags.items() if value is not None]
    if given:
        raise PlannerInputError(f"{', '.join(given)}: only for a model given by --params alone; the model's config already sets them")

    path = _as_path(model)
    stored: StoredWeights | None = None
    suffix_precision: str | None = None  # a quantized repo of a catalog model ships in this precision
    shards_folder: Path | None = None
    if path.suffix.lower() == ".gguf":
        if not _exists(path, model):
            raise PlannerInputError(f"model: no file {model!r}")
        from planner.model.checkpoint import architecture_from_gguf, gguf_file_type_name, read_gguf

        gguf = read_gguf(path)
        name = path.stem if path.stem.isprintable() else repr(path.stem)
        arch = architecture_from_gguf(gguf, name, _catalog_precision(catalog, gguf_file_type_name(gguf.file_type)))
        return replace(arch, exact=False, declared_params=params, stored_bytes=None) if params else arch
    if _exists(path, model):
        try:
            is_dir = path.is_dir()
            config = load_config_file(path)
        except PermissionError:  # a folder planner may list but not search (or the reverse)
            raise PlannerInputError(f"model: cannot read {model!r} (permission denied: planner needs to read and search "
                                    "the model folder); check its permissions") from None
        shards_folder = path if is_dir else path.parent
        name = (path.name if is_dir else shards_folder.name if path.name == "config.json" else path.stem) or model
        name = name if name.isprintable() else repr(name)  # a newline in a folder name would split messages
    elif model.endswith(".json"):
        raise PlannerInputError(f"model: no file {model!r}; give a path to config.json or a catalog name")
    elif model.startswith(_PATH_STARTS) or model in (".", ".."):
        raise PlannerInputError(f"model: no file or folder {model!r}; check the path")
    elif _in_catalog(catalog, model) or "/" not in model:
        record, suffix_precision = catalog.model_and_precision(model)
        config, name = record.config, record.name
    else:
        config, stored = fetch_from_hub(model)
        name = model
    try:
        arch = architecture_from_config(config, name)
    except UnsupportedArchitecture:
        if params is None and shards_folder is not None:  # the weights files, read only when they give the count
            from planner.model.checkpoint import find_safetensors, safetensors_weights

            shards = find_safetensors(shards_folder)
            stored = safetensors_weights(shards) if shards else None
        if params is None and stored is None:
            raise
        arch = size_only_architecture_from_config(config, name, params or stored.elements)  # type: ignore[union-attr]
        if params is None and stored is not None:
            return replace(arch, stored_bytes=stored.total_bytes)
        return arch
    if params is not None:
        return replace(arch, exact=False, declared_params=params)
    return replace(arch, stored_precision=suffix_precision) if suffix_precision else arch


# An argument starting like this is a path on this machine, never a Hub id or catalog name
_PATH_STARTS = ("./", "../", "/", "~", ".\\", "..\\")
# The forms a Hub model page or URL takes, for a message that names the id inside (compiled by re when a Hub id is
# read, not at every start)
_HUB_URL = r"^(?:hf://|https?://(?:www\.)?huggingface\.co/)(?:models/)?([^/?#]+/[^/?#]+)"
# One attempt at the Hub, not huggingface_hub's 5 retries over ~24 s: a command answers within 10 s
HUB_TIMEOUT_S = 5.0


def _as_path(model: str) -> Path:
    try:
        return Path(model).expanduser()
    except RuntimeError:  # "~nouser/...": no such home folder, so not a path on this machine
        return Path(model)


def _exists(path: Path, model: str) -> bool:
    """Whether MODEL names something here (a broken symbolic link too: reading it then says so)."""
    try:
        os.lstat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise PlannerInputError(f"model: cannot look at {model!r} (permission denied on a folder above it); "
                                "check the permissions") from None
    except (OSError, ValueError):  # a name too long for the filesystem, or holding NUL: not a file
        return False


def _in_catalog(catalog: Catalog, model: str) -> bool:
    try:
        catalog.model_and_precision(model)
        return True
    except PlannerInputError:
        return False


def _catalog_precision(catalog: Catalog, name: str | None) -> str | None:
    if name is None:
        return None
    try:
        return catalog.precisions.get(name).name
    except PlannerInputError:
        return None


def fetch_from_hub(repo_id: str) -> tuple[dict, StoredWeights | None]:
    """config.json and the safetensors metadata of a Hub repo: no weights are downloaded."""
    try:
        from huggingface_hub import get_safetensors_metadata, hf_hub_download, try_to_load_from_cache
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError
        from huggingface_hub.utils import validate_repo_id
    except ImportError:
        raise PlannerInputError(f"unknown model {repo_id!r}: not in the catalog; to read it from the Hugging Face Hub "
                                "pip install huggingface_hub, or give a path to its config.json") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    url = re.match(_HUB_URL, repo_id)
    try:
        if not repo_id.isascii():  # the Hub's names are ASCII; huggingface_hub >= 1.x lets any word character through
            raise HFValidationError(repo_id)
        validate_repo_id(repo_id)
    except HFValidationError:
        hint = f"write the id alone: {url.group(1)}" if url else "a Hub id is org/name (letters, digits, - _ .)"
        raise PlannerInputError(f"model {repo_id!r}: not a catalog name, a local path or a Hugging Face repo id; "
                                f"{hint}") from None
    reachable = offline or _hub_reachable(repo_id)
    try:
        config_path = hf_hub_download(repo_id, "config.json") if reachable else try_to_load_from_cache(repo_id, "config.json")
    except LocalEntryNotFoundError:
        config_path = None
    except HfHubHTTPError as exc:
        raise _refused(repo_id, exc) from None
    if not isinstance(config_path, str):
        why = "HF_HUB_OFFLINE is set" if offline else "the Hub cannot be reached"
        raise PlannerInputError(f"model {repo_id!r}: {why} and its config.json is not in the local cache; "
                                "go online once, or give a path to config.json")
    config = load_config_file(config_path)
    stored = None
    if reachable and not offline:
        from planner.model.checkpoint import SAFETENSORS_BITS, StoredWeights

        try:
            counts = get_safetensors_metadata(repo_id).parameter_count  # elements per stored dtype
            by_dtype = {dtype: n * SAFETENSORS_BITS[dtype] // 8 for dtype, n in counts.items() if dtype in SAFETENSORS_BITS}
            if counts and len(by_dtype) == len(counts):
                stored = StoredWeights(("hub safetensors metadata",), sum(by_dtype.values()), sum(counts.values()), by_dtype)
        except Exception:  # safetensors metadata is optional: the config alone still counts the model
            stored = None
    return config, stored


def _hub_reachable(repo_id: str) -> bool:
    """One request for config.json's metadata, no retries: False when the Hub cannot be reached at all."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_S)
    except HfHubHTTPError as exc:
        raise _refused(repo_id, exc) from None
    except Exception:  # noqa: BLE001 - the HTTP client's own transport errors (refused, DNS, timeout, TLS)
        return False
    return True


def _refused(repo_id: str, exc: Exception) -> PlannerInputError:
    return PlannerInputError(f"model {repo_id!r}: the Hub refused config.json ({exc.__class__.__name__}); "
                             "check the repo id, or log in for a gated model")
