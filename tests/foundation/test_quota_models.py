"""Quotas and priority classes at the boundary (contract 5.3 / 5.4): every inconsistency is
a 422 with the field path, and the rule helpers of models/rules.py."""

from __future__ import annotations

from typing import Any

import pytest

from models import BUILTIN_CATALOG, PlanRequest
from models.rules import (
    guaranteed_served,
    lexicographic_levels,
    priority_classes,
    quota_chain,
    quota_keys,
    quota_usage,
)
from tests.foundation.test_request_models import errors, request

A100 = "A100-SXM4-40GB"


def with_quotas(quotas: dict[str, Any], jobs: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    return request(jobs=jobs, quotas=quotas)


@pytest.mark.parametrize(
    ("quotas", "loc", "kind"),
    [
        ({"a": {"parent": "zz"}}, ("cluster", "quotas", "a", "parent"), "invalid_reference"),
        ({"a": {"parent": "b"}, "b": {"parent": "a"}}, ("cluster", "quotas", "a", "parent"),
         "invalid_reference"),
        ({"a": {"parent": "a"}}, ("cluster", "quotas", "a", "parent"), "invalid_reference"),
        ({"p": {"guaranteed": {"*": 4}}, "a": {"parent": "p", "guaranteed": {"*": 3}},
          "b": {"parent": "p", "guaranteed": {"*": 2}}},
         ("cluster", "quotas", "p", "guaranteed", "*"), "invalid_reference"),
        # a model key the parent does not name is compared with the parent's "*"
        ({"p": {"guaranteed": {"*": 1}}, "a": {"parent": "p", "guaranteed": {A100: 2}}},
         ("cluster", "quotas", "p", "guaranteed", A100), "invalid_reference"),
        ({"a": {"guaranteed": {"A100-40": 1}}}, ("cluster", "quotas", "a", "guaranteed",
                                                 "A100-40"), "invalid_reference"),
        ({"a": {"limit": {"H100": 1}}}, ("cluster", "quotas", "a", "limit", "H100"),
         "invalid_reference"),
        ({"a": {"guaranteed": {"*": 3}, "limit": {"*": 2}}},
         ("cluster", "quotas", "a", "guaranteed", "*"), "invalid_reference"),
        ({"a": {"guaranteed": {"*": -1}}}, ("cluster", "quotas", "a", "guaranteed", "*"),
         "greater_than_equal"),
        ({"a": {"limit": {"*": float("inf")}}}, ("cluster", "quotas", "a", "limit", "*"),
         "finite_number"),
        ({"a": {"limit": {"*": float("nan")}}}, ("cluster", "quotas", "a", "limit", "*"),
         "finite_number"),
        ({"a": {"share": 1}}, ("cluster", "quotas", "a", "share"), "extra_forbidden"),
    ],
)
def test_bad_quotas(quotas: dict[str, Any], loc: tuple[str | int, ...], kind: str) -> None:
    assert (loc, kind) in errors(with_quotas(quotas))


def test_unknown_model_key_suggests_close_names() -> None:
    with pytest.raises(ValueError, match="did you mean 'A100-SXM4-40GB'"):
        PlanRequest.model_validate(with_quotas({"a": {"limit": {"A100-SXM4-40": 1}}}))


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1, 1.5, "high"])
def test_bad_priority(priority: Any) -> None:
    loc = ("jobs", 0, "priority")
    assert loc in [e[0] for e in errors(request(jobs=[{"name": "j", "gpus": 1,
                                                        "priority": priority}]))]


def test_valid_quota_tree_and_helpers() -> None:
    req = PlanRequest.model_validate(with_quotas(
        {"org": {"guaranteed": {"*": 4, A100: 2}, "limit": {"*": 6}},
         "a": {"parent": "org", "guaranteed": {"*": 2, A100: 2}},
         "b": {"parent": "org", "guaranteed": {"*": 2}, "limit": {A100: 1}}},
        jobs=[{"name": "j", "gpus": 2, "tenant": "a", "priority": 5},
              {"name": "k", "gpu_share": 0.5, "tenant": "b"}]))
    q = req.cluster.quotas
    assert quota_chain(q, "a") == ["a", "org"]
    assert quota_chain(q, "nobody") == []
    assert quota_keys(q, "b", A100) == [("b", A100), ("b", "*"), ("org", A100), ("org", "*")]
    assert quota_keys(q, "b", "T4-16GB") == [("b", "*"), ("org", "*")]
    spec = BUILTIN_CATALOG[A100]
    assert quota_usage(req.jobs[0], spec) == 2.0 and quota_usage(req.jobs[1], spec) == 0.5
    usage = {("a", A100): 2.0, ("a", "*"): 2.0, ("org", A100): 2.5, ("org", "*"): 2.5,
             ("b", "*"): 0.5}
    # a: 2 + 2, b: 0.5, org: min(2.5, 4) + min(2.5, 2)
    assert guaranteed_served(q, usage) == pytest.approx(4 + 0.5 + 2.5 + 2)
    assert priority_classes(req.jobs) == [5, 0]
    assert lexicographic_levels(req)


def test_v1_request_has_no_levels() -> None:
    req = PlanRequest.model_validate(request(jobs=[{"name": "j", "gpus": 1}]))
    assert req.jobs[0].priority == 0 and req.cluster.quotas == {}
    assert not lexicographic_levels(req)
