"""The GPU catalog against the facts of /work/shared/mig-geometry.md.

The tables below are typed in from that document, independently of models/catalog.py, and
the layout rule is re-implemented here (`_valid`) to cross-check the enumeration.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import (
    BUILTIN_CATALOG,
    GpuModel,
    Instance,
    instance_positions,
    is_maximal_layout,
    is_valid_layout,
    layout_violations,
    valid_layouts,
)

A100 = BUILTIN_CATALOG["A100-SXM4-40GB"]
A30 = BUILTIN_CATALOG["A30-24GB"]

# (name, compute, memory slices, memory GiB, max count, starts), A100-SXM4-40GB table.
A100_40_ROWS = [
    ("1g.5gb", 1, 1, 5, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.5gb+me", 1, 1, 5, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.10gb", 1, 2, 10, 4, (0, 2, 4, 6)),
    ("2g.10gb", 2, 2, 10, 3, (0, 2, 4)),
    ("3g.20gb", 3, 4, 20, 2, (0, 4)),
    ("4g.20gb", 4, 4, 20, 1, (0,)),
    ("7g.40gb", 7, 8, 40, 1, (0,)),
]
# Same geometry, other names: 1g (1 slice), +me, 1g (2 slices), 2g, 3g, 4g, 7g.
RENAMED = {
    "A100-SXM4-80GB": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                       "7g.80gb"),
    "H100-SXM5-80GB": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                       "7g.80gb"),
    "H100-NVL-94GB": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb",
                      "7g.94gb"),
    "H200-141GB": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
                   "7g.141gb"),
}
A30_ROWS = [
    ("1g.6gb", 1, 1, 6, 4, (0, 1, 2, 3)),
    ("1g.6gb+me", 1, 1, 6, 1, (0, 1, 2, 3)),
    ("2g.12gb", 2, 2, 12, 2, (0, 2)),
    ("2g.12gb+me", 2, 2, 12, 1, (0, 2)),
    ("4g.24gb", 4, 4, 24, 1, (0,)),
]
Row = tuple[str, int, int, int, int, tuple[int, ...]]
#: model -> (compute slices, memory slices, memory GiB, profile rows)
EXPECTED: dict[str, tuple[int, int, int, list[Row]]] = {
    "A100-SXM4-40GB": (7, 8, 40, A100_40_ROWS),
    "A30-24GB": (4, 4, 24, A30_ROWS),
}
for _model, _names in RENAMED.items():
    _rows = []
    for _name, _row in zip(_names, A100_40_ROWS, strict=True):
        _mem = int(_name.split(".")[1].removesuffix("+me").removesuffix("gb"))
        _rows.append((_name, _row[1], _row[2], _mem, _row[4], _row[5]))
    EXPECTED[_model] = (7, 8, _rows[-1][3], _rows)

NON_MIG = {"V100-32GB": 32, "T4-16GB": 16, "L40S-48GB": 48}
CONTRACT_MODELS = ["A100-SXM4-40GB", "A100-SXM4-80GB", "A30-24GB", "H100-SXM5-80GB",
                   "H200-141GB", "L40S-48GB", "V100-32GB", "T4-16GB"]


def lay(*items: tuple[str, int]) -> list[Instance]:
    return [Instance(p, s) for p, s in items]


def _valid(model_name: str, instances: Iterable[Instance]) -> bool:
    """The placement rule of mig-geometry.md, from the EXPECTED tables only."""
    compute, mem_slices, _, rows = EXPECTED[model_name]
    spec = {r[0]: r for r in rows}
    used: set[int] = set()
    counts: Counter[str] = Counter()
    total = 0
    for inst in instances:
        row = spec.get(inst.profile)
        if row is None or inst.start not in row[5]:
            return False
        span = set(range(inst.start, inst.start + row[2]))
        if span & used or max(span) >= mem_slices:
            return False
        used |= span
        counts[inst.profile] += 1
        total += row[1]
    return (total <= compute and all(counts[p] <= spec[p][4] for p in counts)
            and sum(n for p, n in counts.items() if p.endswith("+me")) <= 1)


def _independent_layouts(model_name: str) -> set[frozenset[Instance]]:
    """Every valid layout, enumerated slice by slice (not position by position)."""
    _, mem_slices, _, rows = EXPECTED[model_name]
    out: set[frozenset[Instance]] = set()

    def walk(slice_: int, chosen: list[Instance]) -> None:
        if slice_ >= mem_slices:
            if _valid(model_name, chosen):
                out.add(frozenset(chosen))
            return
        walk(slice_ + 1, chosen)  # leave this memory slice empty
        for name, _, size, _, _, starts in rows:
            if slice_ in starts and slice_ + size <= mem_slices:
                chosen.append(Instance(name, slice_))
                walk(slice_ + size, chosen)
                chosen.pop()

    walk(0, [])
    return out


def test_contract_models_present() -> None:
    for name in CONTRACT_MODELS:
        assert name in BUILTIN_CATALOG
        assert BUILTIN_CATALOG[name].relative_speed > 0


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_rows_exactly_as_tables(name: str) -> None:
    compute, mem_slices, memory, rows = EXPECTED[name]
    model = BUILTIN_CATALOG[name]
    assert (model.compute_slices, model.memory_slices, model.memory_gib) == (
        compute, mem_slices, memory)
    got = [(p.name, p.compute_slices, p.memory_slices, p.memory_gib, p.max_count, p.starts)
           for p in model.mig_profiles]
    assert sorted(got) == sorted(rows)
    for p in model.mig_profiles:
        assert p.media_extensions == p.name.endswith("+me")


@pytest.mark.parametrize(("name", "memory"), sorted(NON_MIG.items()))
def test_non_mig_models(name: str, memory: int) -> None:
    model = BUILTIN_CATALOG[name]
    assert not model.mig_capable and model.memory_gib == memory
    assert valid_layouts(model) == (frozenset(),)
    assert layout_violations(model, []) == ["model is not MIG-capable"]


@pytest.mark.parametrize(
    "layout",
    [
        lay(("3g.20gb", 0), ("3g.20gb", 4)),
        lay(("4g.20gb", 0), ("3g.20gb", 4)),
        lay(("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.5gb", 6)),
        lay(*[("1g.5gb", s) for s in range(7)]),
        lay(("7g.40gb", 0)),
        lay(("1g.5gb+me", 0), ("1g.5gb", 1)),
        lay(("1g.10gb", 0), ("1g.10gb", 2), ("1g.10gb", 4), ("1g.10gb", 6)),
        lay(),
    ],
)
def test_valid_a100_layouts(layout: list[Instance]) -> None:
    assert layout_violations(A100, layout) == []
    assert frozenset(layout) in set(valid_layouts(A100))


@pytest.mark.parametrize(
    "layout",
    [
        lay(("4g.20gb", 0), ("4g.20gb", 4)),  # 4g has only start 0
        lay(("4g.20gb", 0), ("4g.20gb", 0)),  # overlap and max count
        lay(("1g.5gb+me", 0), ("1g.5gb+me", 2)),  # two +me
        lay(("1g.5gb", 7)),  # a 1-slice 1g cannot start at 7
        lay(("3g.20gb", 0), ("4g.20gb", 0)),  # overlap
        lay(("3g.20gb", 2)),  # not a listed start
        lay(("2g.10gb", 6)),  # not a listed start
        lay(("7g.40gb", 0), ("1g.5gb", 0)),  # overlap
        lay(("4g.20gb", 0), ("2g.10gb", 4), ("2g.10gb", 6)),  # 2g cannot start at 6
        lay(("3g.20gb", 0), ("2g.10gb", 4), ("2g.10gb", 6)),  # 2g cannot start at 6
        lay(("4g.20gb", 0), ("2g.10gb", 4), ("1g.10gb", 6), ("1g.5gb", 7)),  # start 7
        lay(("5g.25gb", 0)),  # unknown profile
    ],
)
def test_invalid_a100_layouts(layout: list[Instance]) -> None:
    assert layout_violations(A100, layout)
    assert not is_valid_layout(A100, layout)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_compute_slices_never_exceed_the_total(name: str) -> None:
    compute, _, _, rows = EXPECTED[name]
    per_profile = {r[0]: r[1] for r in rows}
    sums = [sum(per_profile[i.profile] for i in layout)
            for layout in valid_layouts(BUILTIN_CATALOG[name])]
    assert max(sums) == compute


def test_seven_1g_leave_memory_slice_7_unused() -> None:
    seven = frozenset(lay(*[("1g.5gb", s) for s in range(7)]))
    assert is_valid_layout(A100, seven)
    assert is_maximal_layout(A100, seven)
    spec = A100.profile("1g.5gb")
    assert spec is not None
    used = {s for i in seven for s in range(i.start, i.start + spec.memory_slices)}
    assert used == set(range(7))


def test_a30_facts() -> None:
    assert is_valid_layout(A30, lay(("2g.12gb", 0), ("2g.12gb", 2)))
    assert is_valid_layout(A30, lay(("2g.12gb+me", 0), ("1g.6gb", 2), ("1g.6gb", 3)))
    assert not is_valid_layout(A30, lay(("2g.12gb+me", 0), ("1g.6gb+me", 2)))
    assert not is_valid_layout(A30, lay(("2g.12gb", 1)))
    assert not is_valid_layout(A30, lay(("4g.24gb", 0), ("1g.6gb", 3)))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_enumerated_layout_passes_and_none_is_missing(name: str) -> None:
    model = BUILTIN_CATALOG[name]
    layouts = valid_layouts(model)
    assert len(set(layouts)) == len(layouts)
    for layout in layouts:
        assert layout_violations(model, layout) == []
        assert _valid(name, layout)
    assert set(layouts) == _independent_layouts(name)


def test_a30_enumeration_equals_brute_force_over_all_subsets() -> None:
    positions = instance_positions(A30)
    assert len(positions) == 4 + 4 + 2 + 2 + 1
    brute = {
        frozenset(combo)
        for k in range(len(positions) + 1)
        for combo in itertools.combinations(positions, k)
        if _valid("A30-24GB", combo)
    }
    assert set(valid_layouts(A30)) == brute


@pytest.mark.parametrize("name", ["A100-SXM4-40GB", "A30-24GB", "H200-141GB"])
def test_maximal_layouts(name: str) -> None:
    model = BUILTIN_CATALOG[name]
    layouts = set(valid_layouts(model))
    positions = instance_positions(model)
    n_max = 0
    for layout in layouts:
        extendable = any(p not in layout and layout | {p} in layouts for p in positions)
        assert is_maximal_layout(model, layout) == (not extendable)
        if not extendable:
            n_max += 1
            # No valid placement can be added to a maximal layout.
            for p in positions:
                if p not in layout:
                    assert not is_valid_layout(model, [*layout, p])
    assert 0 < n_max < len(layouts)


def test_same_geometry_family_has_same_layout_count() -> None:
    counts = {name: len(valid_layouts(BUILTIN_CATALOG[name])) for name in RENAMED}
    counts["A100-SXM4-40GB"] = len(valid_layouts(A100))
    assert len(set(counts.values())) == 1


def test_enumeration_is_cached() -> None:
    assert valid_layouts(A100) is valid_layouts(A100)
    copy = GpuModel.model_validate(A100.model_dump())
    assert valid_layouts(copy) == valid_layouts(A100)


_MIG_MODELS = sorted(n for n, m in BUILTIN_CATALOG.items() if m.mig_capable)


@st.composite
def _any_layout(draw: st.DrawFn) -> tuple[str, list[Instance]]:
    """A MIG model and any list of instances on it: its profiles or an unknown one, at
    any start 0-7 (invalid starts too), repeats allowed."""
    name = draw(st.sampled_from(_MIG_MODELS))
    profiles = [p.name for p in BUILTIN_CATALOG[name].mig_profiles] + ["9g.999gb"]
    items = draw(st.lists(st.tuples(st.sampled_from(profiles), st.integers(0, 7)),
                          max_size=9))
    return name, [Instance(p, s) for p, s in items]


@settings(max_examples=600, deadline=None, derandomize=True)
@given(_any_layout())
def test_the_fast_layout_check_agrees_with_the_violations(case: tuple[str, list[Instance]]
                                                          ) -> None:
    """`is_valid_layout` (bit masks) says valid exactly when `layout_violations` finds
    nothing, and both agree with the independent rule of the expected tables."""
    name, layout = case
    model = BUILTIN_CATALOG[name]
    fast = is_valid_layout(model, layout)
    assert fast == (not layout_violations(model, layout)), (name, layout)
    if name in EXPECTED:
        assert fast == _valid(name, layout), (name, layout)
