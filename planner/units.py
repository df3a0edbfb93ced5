"""Byte sizes: parsing "24GB" / "79.19GiB" / "81559MiB" and printing GB next to GiB.

Bytes are integers everywhere inside planner; decimal GB (10^9) and binary GiB (2^30) only
appear at the edges (parsing user input, rendering output).
"""

from __future__ import annotations

import re
import reprlib
from decimal import Decimal
from typing import Any

from planner.errors import PlannerInputError

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

_SIZE_UNITS = {
    "b": 1,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
}
# One way to split the digits (not [0-9]*\.?[0-9]+, which backtracks quadratically on a long run of digits)
_NUMBER = r"((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
# The size and count patterns are compiled by re on their first use (and kept in its cache), not at import:
# most commands read neither a size nor a count (0.5 ms of `planner estimate`'s start, measured)
_SIZE_PATTERN = rf"^\s*{_NUMBER}\s*([a-zA-Z]*)\s*$"
# Far beyond any GPU or model: a larger figure is a typo (1e999 would overflow Decimal, and 9 x 5000
# digits would become a 5000-digit "size").
MAX_SIZE_BYTES = 10**18  # 1 EB
MAX_COUNT = 10**15  # a quadrillion parameters

# Sanity bounds on user numbers: far beyond any real deployment, small enough to catch typos.
MAX_CONTEXT = 100_000_000
MAX_BATCH = 1_000_000
MAX_GPUS_PER_REPLICA = 4096


def _scaled(number: str, factor: int, limit: int, refusal: str) -> int:
    """number x factor in whole units, checked against `limit` before multiplying."""
    value = Decimal(number)
    if value > Decimal(limit) / factor:
        raise PlannerInputError(refusal)
    return int(value * factor)


def parse_size(text: str, field: str = "size") -> int:
    """Parse a memory size such as '24GB', '79.19GiB', '81559MiB' or '24e9' into whole bytes."""
    match = re.match(_SIZE_PATTERN, str(text))
    if not match:
        raise PlannerInputError(
            f"{field}: cannot read {text!r} as a size; write e.g. 24GB, 79.19GiB or 81559MiB"
        )
    number, unit = match.groups()
    factor = _SIZE_UNITS.get(unit.lower() if unit else "b")
    if factor is None:
        raise PlannerInputError(
            f"{field}: unknown unit {unit!r} in {text!r}; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
        )
    value = _scaled(number, factor, MAX_SIZE_BYTES,
                    f"{field}: {text!r} is more memory than any GPU has (limit 1 EB); check the number")
    if value <= 0:
        raise PlannerInputError(f"{field}: {text!r} must be larger than zero")
    return value


def gb(n_bytes: int) -> float:
    return n_bytes / GB


def gib(n_bytes: int) -> float:
    return n_bytes / GiB


def format_bytes(n_bytes: int) -> str:
    """'16.00 GB (14.90 GiB)': decimal first, as the seed's examples are decimal."""
    return f"{gb(n_bytes):,.2f} GB ({gib(n_bytes):,.2f} GiB)"


def format_count(n: int) -> str:
    """A parameter count as '8.03B' / '494M'."""
    for factor, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= factor:
            return f"{n / factor:.2f}{suffix}"
    return str(n)


_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_COUNT_PATTERN = rf"^\s*{_NUMBER}\s*([kKmMbBtT]?)\s*$"


def parse_count(text: str, field: str = "count") -> int:
    """A parameter count such as '8e9', '8B', '70.6b' or '8030261248'."""
    match = re.match(_COUNT_PATTERN, str(text))
    if not match:
        raise PlannerInputError(f"{field}: cannot read {text!r} as a count; write e.g. 8e9, 8B or 8030261248")
    value = _scaled(match.group(1), _COUNT_SUFFIX[match.group(2).lower()], MAX_COUNT,
                    f"{field}: {text!r} is more than any model has (limit 1e15); check the number")
    if value <= 0:
        raise PlannerInputError(f"{field}: {text!r} must be larger than zero")
    return value


# A token count as context lengths are quoted (8192, 8K, 128k: K = 1024)
_TOKENS_RE = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")

# Echoes of a user's value stay short: a YAML alias bomb is small on disk but enormous when printed.
_short = reprlib.Repr()
_short.maxlevel, _short.maxlist, _short.maxdict, _short.maxstring, _short.maxlong, _short.maxother = 2, 4, 4, 40, 40, 40


def shown(value: Any) -> str:
    return _short.repr(value)


def parse_tokens(value: Any, limit: int = MAX_CONTEXT) -> int:
    """A token count: 8192, or '8K' / '128k' (K = 1024, as context lengths are quoted)."""
    if isinstance(value, bool):
        raise ValueError("must be a whole number of tokens, e.g. 8192 or 8K")
    too_large = f"{shown(value)} is beyond any real deployment (limit {limit:,}); check the number"
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and (m := _TOKENS_RE.match(value)):
        digits, suffix = m.groups()
        if len(digits) > len(str(limit)):  # past the limit, and perhaps past int()'s 4,300-digit limit too
            raise ValueError(too_large)
        n = int(digits) * {"": 1, "k": 1024, "m": 1024**2}[suffix.lower()]
    else:
        raise ValueError(f"must be a whole number of tokens, e.g. 8192 or 8K (got {shown(value)})")
    if n < 1:
        raise ValueError(f"must be at least 1 (got {shown(value)})")
    if n > limit:
        raise ValueError(too_large)
    return n
