"""Kubernetes quantities as kubectl prints them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from api.k8s.quantity import QuantityError, count, cpu_millicores, memory_gib, parse_quantity


@pytest.mark.parametrize(("text", "value"), [
    ("64", Decimal(64)),
    ("63500m", Decimal("63.5")),
    ("515807104Ki", Decimal(515807104 * 1024)),
    ("1Ti", Decimal(2) ** 40),
    ("1e3", Decimal(1000)),
    ("1E", Decimal(10) ** 18),
    ("0.5", Decimal("0.5")),
    (".5Gi", Decimal(2) ** 29),
    ("100u", Decimal("0.0001")),
    (4, Decimal(4)),
])
def test_parse(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["12x", "1.5.2", "", "Gi", "1 Gi", "0x10", None, True, [1]])
def test_malformed(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_units() -> None:
    assert cpu_millicores("95690m") == 95690
    assert cpu_millicores("2") == 2000
    assert memory_gib("1Ti") == 1024
    assert memory_gib("64Gi") == 64
    assert count("8") == 8
    with pytest.raises(QuantityError):
        count("1.5")
    with pytest.raises(QuantityError):
        memory_gib("-1Gi")
