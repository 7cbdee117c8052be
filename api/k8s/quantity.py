"""Kubernetes resource quantities (`resource.Quantity`): "64", "63500m", "515807104Ki", "1Ti".

The grammar is the apimachinery one: a signed decimal number followed by at most one
suffix, either binary SI (Ki, Mi, Gi, Ti, Pi, Ei), decimal SI (n, u, m, "", k, M, G, T, P, E)
or a decimal exponent (e3, E-2). Values are parsed exactly with `Decimal`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))$"
)

GIB = Decimal(2) ** 30


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity (a string as kubectl prints it, or a JSON number)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"quantity must be a string, got {type(value).__name__}")
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if m is None:
        raise QuantityError(f"malformed quantity {value!r}")
    try:
        number = Decimal(m["num"])
    except InvalidOperation as e:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"malformed quantity {value!r}") from e
    if m["exp"] is not None:
        return number.scaleb(int(m["exp"][1:]))
    return number * _SUFFIXES[m["suffix"]]


def cpu_millicores(value: object) -> float:
    """A CPU quantity in millicores ("2" -> 2000, "63500m" -> 63500)."""
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"negative CPU quantity {value!r}")
    return float(q * 1000)


def memory_gib(value: object) -> float:
    """A memory quantity in GiB ("515807104Ki" -> 491.9..., "1Ti" -> 1024)."""
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"negative memory quantity {value!r}")
    return float(q / GIB)


def count(value: object) -> int:
    """An extended-resource count such as `nvidia.com/gpu: "4"` (a non-negative integer)."""
    q = parse_quantity(value)
    if q < 0 or q != q.to_integral_value():
        raise QuantityError(f"device count must be a whole non-negative number, got {value!r}")
    return int(q)
