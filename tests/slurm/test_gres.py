"""GRES, TRES and host-list strings as Slurm prints them, and the GRES type table."""

from __future__ import annotations

import pytest

from api.slurm.gres import GresError, GresItem, expand_hostlist, parse_gres, parse_tres
from api.slurm.types import GresType, resolve_type
from models import BUILTIN_CATALOG


@pytest.mark.parametrize(("text", "items"), [
    ("gpu:a100:2,gpu:1g.5gb:7",
     [GresItem("gpu", "a100", 2), GresItem("gpu", "1g.5gb", 7)]),
    ("gpu:a100:2(S:0-1)", [GresItem("gpu", "a100", 2)]),
    ("gpu:a100:4(S:0,1),gpu:v100:2(S:1)",
     [GresItem("gpu", "a100", 4), GresItem("gpu", "v100", 2)]),
    ("gpu:4", [GresItem("gpu", None, 4)]),
    ("gpu:a100:1(IDX:0),gpu:1g.5gb:3(IDX:2-4)",
     [GresItem("gpu", "a100", 1, (0,)), GresItem("gpu", "1g.5gb", 3, (2, 3, 4))]),
    ("gpu:a100:3(IDX:0,2-3)", [GresItem("gpu", "a100", 3, (0, 2, 3))]),
    ("gpu:1g.5gb:0(IDX:N/A)", [GresItem("gpu", "1g.5gb", 0, ())]),
    ("gpu:0(IDX:)", [GresItem("gpu", None, 0, ())]),
    ("mps:400,gpu:t4:1,bandwidth:lustre:4G",
     [GresItem("mps", None, 400), GresItem("gpu", "t4", 1),
      GresItem("bandwidth", "lustre", 4 * 1024**3)]),
    ("", []), ("(null)", []), ("N/A", []),
])
def test_parse_gres(text: str, items: list[GresItem]) -> None:
    assert parse_gres(text) == items


@pytest.mark.parametrize("text", ["gpu:a100:x", "gpu:a:b:c:d", "gpu:a100:2(IDX:0-", ":2",
                                  "gpu:a100:2(Q:1)", "gpu:a100:2(IDX:a-b)"])
def test_parse_gres_rejects(text: str) -> None:
    with pytest.raises(GresError):
        parse_gres(text)


@pytest.mark.parametrize(("text", "items"), [
    ("gres:gpu:a100:2", [GresItem("gpu", "a100", 2)]),
    ("gres/gpu:a100=2", [GresItem("gpu", "a100", 2)]),
    ("gres/gpu=4", [GresItem("gpu", None, 4)]),
    ("gres:gpu:1,gres:mps:100", [GresItem("gpu", None, 1), GresItem("mps", None, 100)]),
    ("cpu=2,mem=1G,gres/gpu:t4=1,license/x=1", [GresItem("gpu", "t4", 1)]),
    ("", []),
])
def test_parse_tres(text: str, items: list[GresItem]) -> None:
    assert parse_tres(text) == items


@pytest.mark.parametrize(("text", "hosts"), [
    ("vm", ["vm"]),
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("rack1-n[8-10]", ["rack1-n8", "rack1-n9", "rack1-n10"]),
    ("a[1-2]b", ["a1b", "a2b"]),
    ("", []), ("None assigned", []),
])
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-x]", "n[1-2]]"])
def test_expand_hostlist_rejects(text: str) -> None:
    with pytest.raises(GresError):
        expand_hostlist(text)


@pytest.mark.parametrize(("gres_type", "expected"), [
    ("a100", GresType("A100-SXM4-40GB")),
    ("A100_80GB", GresType("A100-SXM4-80GB")),
    ("nvidia_a100-sxm4-80gb", GresType("A100-SXM4-80GB")),   # AutoDetect=nvml
    ("nvidia_h100_80gb_hbm3", GresType("H100-SXM5-80GB")),   # via the GFD alias table
    ("tesla_t4", GresType("T4-16GB")),
    ("1g.5gb", GresType("A100-SXM4-40GB", "1g.5gb")),        # one catalog model has it
    ("nvidia_a100_1g.5gb", GresType("A100-SXM4-40GB", "1g.5gb")),
    ("nvidia_a100_3g.40gb", GresType("A100-SXM4-80GB", "3g.40gb")),  # the family member
    ("h100_1g.10gb", GresType("H100-SXM5-80GB", "1g.10gb")),
])
def test_resolve_type(gres_type: str, expected: GresType) -> None:
    assert resolve_type(gres_type, BUILTIN_CATALOG) == expected


def test_resolve_type_reports_what_it_cannot_map() -> None:
    unknown = resolve_type("k80", BUILTIN_CATALOG)
    assert isinstance(unknown, str) and "--gres-type k80=MODEL" in unknown
    ambiguous = resolve_type("1g.10gb", BUILTIN_CATALOG)   # A100 40/80 GB and H100 have it
    assert isinstance(ambiguous, str) and "A100-SXM4-80GB" in ambiguous
    # ... unless the node's whole GPUs or the caller's table decide.
    assert resolve_type("1g.10gb", BUILTIN_CATALOG, node_models=["H100-SXM5-80GB"]) == \
        GresType("H100-SXM5-80GB", "1g.10gb")
    assert resolve_type("k80", BUILTIN_CATALOG, {"k80": "T4-16GB"}) == GresType("T4-16GB")
    assert isinstance(resolve_type("k80", BUILTIN_CATALOG, {"k80": "K80"}), str)
