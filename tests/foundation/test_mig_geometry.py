"""`MigGeometry.can_host` answers what `options` would (whether any position is left for
one of the profiles), on random valid layouts of every MIG model, with and without
reconfiguration."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from models.catalog import BUILTIN_CATALOG, valid_layouts
from models.instance import MigGeometry

MIG_MODELS = sorted(m for m, spec in BUILTIN_CATALOG.items() if spec.mig_profiles)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), model=st.sampled_from(MIG_MODELS), reconfigure=st.booleans())
def test_can_host_is_whether_there_are_options(data: st.DataObject, model: str,
                                               reconfigure: bool) -> None:
    spec = BUILTIN_CATALOG[model]
    layouts = valid_layouts(spec)
    current = data.draw(st.sampled_from(layouts))
    used = frozenset(data.draw(st.sets(st.sampled_from(sorted(current)))) if current
                     else set())
    names = [p.name for p in spec.mig_profiles]
    profiles = tuple(data.draw(st.lists(st.sampled_from([*names, "9g.999gb"]), min_size=1,
                                        max_size=3, unique=True)))
    fresh = MigGeometry(BUILTIN_CATALOG, reconfigure)
    asked = MigGeometry(BUILTIN_CATALOG, reconfigure)
    want = bool(asked.options(model, used, current - used, profiles))
    assert fresh.can_host(model, used, current - used, profiles) == want
    assert asked.can_host(model, used, current - used, profiles) == want   # from the cache
