import pytest

from planner.errors import PlannerInputError
from planner.units import GiB, format_bytes, parse_count, parse_size


@pytest.mark.parametrize("text, expected", [
    ("24GB", 24 * 10**9),
    ("24 gb", 24 * 10**9),
    ("79.19GiB", int(79.19 * GiB)),
    ("81559MiB", 81559 * 2**20),
    ("1TB", 10**12),
    ("512", 512),
    ("2.5e9", 2_500_000_000),
])
def test_parse_size_accepts_decimal_and_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "24 parsecs", "-5GB", "0GB", "1.2.3GB"])
def test_parse_size_rejects_garbage_with_the_field_name(text):
    with pytest.raises(PlannerInputError, match="--gpu-memory"):
        parse_size(text, "--gpu-memory")


@pytest.mark.parametrize("text, expected", [("8e9", 8 * 10**9), ("8B", 8 * 10**9), ("70.6b", 70_600_000_000),
                                            ("8030261248", 8030261248), ("494M", 494_000_000)])
def test_parse_count(text, expected):
    assert parse_count(text) == expected


def test_parse_count_rejects_units_it_does_not_know():
    with pytest.raises(PlannerInputError, match="--params"):
        parse_count("8 GB", "--params")


def test_format_bytes_prints_gb_and_gib_side_by_side():
    assert format_bytes(16 * 10**9) == "16.00 GB (14.90 GiB)"
