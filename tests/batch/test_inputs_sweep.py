"""Reading inputs lazily and building what-if variants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.batch.inputs import InputError, count, expand, iter_sources, request_stem
from api.batch.sweep import (
    BASE,
    EditError,
    SweepError,
    apply,
    build_variants,
    parse_set,
    split_values,
)
from tests.batch.conftest import BAD, GOOD


@pytest.mark.parametrize(("name", "stem"), [
    ("a/foo.request.json", "foo"), ("bar.json", "bar"), ("day.jsonl", "day"),
    ("x.y.json", "x.y"), (".request.json", ".request.json"),
])
def test_request_stem(name: str, stem: str) -> None:
    assert request_stem(Path(name)) == stem


def test_expand_directory_skips_plans_and_other_files(tmp_path: Path) -> None:
    for name in ("b.json", "a.json", "a.plan.json", "notes.txt", "q.jsonl"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in expand([tmp_path])] == ["a.json", "b.json", "q.jsonl"]


def test_expand_rejects_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        expand([tmp_path / "missing.json"])
    with pytest.raises(InputError, match="no request files"):
        expand([tmp_path])


def test_sources_of_the_example_directory(mixed_dir: Path) -> None:
    files = expand([mixed_dir])
    sources = {s.name: s for s in iter_sources(files)}
    assert set(sources) == GOOD | BAD
    assert count(files) == len(GOOD | BAD)
    assert sources["queue-3"].origin.endswith("queue.jsonl:3")
    assert "invalid JSON" in (sources["queue-3"].error or "")
    assert "invalid JSON at line 1" in (sources["broken"].error or "")
    # Field errors are found later, by validation: the document itself reads fine.
    assert sources["queue-4"].error is None and isinstance(sources["queue-4"].document, dict)


def test_split_and_parse_values() -> None:
    assert split_values('1,[2,3],{"a":1,"b":2},"x,y"') == ["1", "[2,3]", '{"a":1,"b":2}',
                                                           '"x,y"']
    sets = parse_set("policy.time_limit_s=2,throughput,true,[1,2]")
    assert [s.value for s in sets] == [2, "throughput", True, [1, 2]]
    assert sets[0].path == ("policy", "time_limit_s")
    assert sets[0].label == "time_limit_s=2"
    for bad in ("policy.objective", "=1", "a..b=1", "a=1,,2"):
        with pytest.raises(SweepError):
            parse_set(bad)


def test_grid_of_variants(data_dir: Path) -> None:
    assert build_variants() == [BASE]
    variants = build_variants(
        ["policy.objective=throughput,fairness", "policy.time_limit_s=1,2"],
        [data_dir / "extra-nodes.json"], ["n1,n2"],
    )
    labels = [v.label for v in variants]
    assert len(labels) == len(set(labels)) == 2 * 2 * 3
    assert "objective=fairness,time_limit_s=2,add=extra-nodes" in labels
    assert "objective=throughput,time_limit_s=1,drain=n1+n2" in labels
    assert "objective=throughput,time_limit_s=1" in labels
    no_base = build_variants([], [data_dir / "extra-nodes.json"], [], baseline=False)
    assert [v.label for v in no_base] == ["add=extra-nodes"]
    with pytest.raises(SweepError, match="share the label"):
        build_variants(["policy.seed=1,1"])


def test_add_nodes_file_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text(json.dumps([{"name": "x", "gpus": [{"index": 0}]}]))
    with pytest.raises(SweepError, match=r"nodes.json: 0\.gpus\.0\.model"):
        build_variants([], [bad], [])
    bad.write_text("[")
    with pytest.raises(SweepError, match="invalid JSON"):
        build_variants([], [bad], [])


def test_apply_edits_a_copy(tiny_doc: dict[str, Any], data_dir: Path) -> None:
    original = json.dumps(tiny_doc)
    assert apply(tiny_doc, BASE) is tiny_doc
    [variant] = build_variants(["jobs.*.preemptible=false"])
    edited = apply(tiny_doc, variant)
    assert isinstance(edited, dict)
    assert [j["preemptible"] for j in edited["jobs"]] == [False] * len(tiny_doc["jobs"])
    drain_add = build_variants([], [data_dir / "extra-nodes.json"], ["n1"], baseline=False)
    added, drained = (apply(tiny_doc, v) for v in drain_add)
    assert isinstance(added, dict) and isinstance(drained, dict)
    assert [n["name"] for n in added["cluster"]["nodes"]] == ["n1", "n2", "h200-extra-1"]
    assert [n.get("schedulable", True) for n in drained["cluster"]["nodes"]] == [False, True]
    assert json.dumps(tiny_doc) == original


def test_apply_creates_missing_objects_and_reports_bad_paths(tiny_doc: dict[str, Any]) -> None:
    del tiny_doc["policy"]
    [variant] = build_variants(["policy.objective=fairness"])
    edited = apply(tiny_doc, variant)
    assert isinstance(edited, dict) and edited["policy"] == {"objective": "fairness"}
    for spec, msg in (("jobs.9.weight=2", "jobs.9: index out of range"),
                      ("jobs.x.weight=2", "jobs.x: expected a list index"),
                      ("jobs.0.name.y=2", "jobs.0.name.y: cannot set a field inside a str")):
        [v] = build_variants([spec])
        with pytest.raises(EditError, match=msg):
            apply(tiny_doc, v)
    [drain] = build_variants([], [], ["nope"], baseline=False)
    with pytest.raises(EditError, match="no node named 'nope'"):
        apply(tiny_doc, drain)
