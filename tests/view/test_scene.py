"""The plan view's scene: job statuses, segment positions (MIG slices, shares) and what the
plan changes, on a hand-made cluster where every case is known; invariants on real plans."""

from __future__ import annotations

import pytest

from api.view.scene import NO_DOMAIN, GpuCell, JobStatus, Mark, Segment, build_scene
from benchmarks.generator import generate_custom
from models import Plan, PlanRequest
from solver import plan as make_plan


def _request() -> PlanRequest:
    return PlanRequest.model_validate({
        "cluster": {"nodes": [
            {"name": "n1", "topology_domain": "r1", "gpus": [
                {"index": 0, "model": "A100-SXM4-40GB"},
                {"index": 1, "model": "A100-SXM4-40GB"},
                {"index": 2, "model": "A100-SXM4-40GB"},
                {"index": 3, "model": "A100-SXM4-40GB", "mig_enabled": True,
                 "mig_instances": [{"profile": "3g.20gb", "start": 0},
                                   {"profile": "3g.20gb", "start": 4}]},
                {"index": 4, "model": "V100-32GB"},
            ]},
            {"name": "n2", "gpus": [{"index": 0, "model": "T4-16GB", "healthy": False},
                                    {"index": 1, "model": "T4-16GB"}]},
        ]},
        "jobs": [
            {"name": "a", "gpus": 1, "current": [{"node": "n1", "gpu": 0}]},
            {"name": "b", "gpus": 1, "current": [{"node": "n1", "gpu": 1}]},
            {"name": "c", "mig_profile": "3g.20gb",
             "current": [{"node": "n1", "gpu": 3, "mig": {"profile": "3g.20gb", "start": 0}}]},
            {"name": "d", "mig_profile": "3g.20gb",
             "current": [{"node": "n1", "gpu": 3, "mig": {"profile": "3g.20gb", "start": 4}}]},
            {"name": "e", "gpu_share": 0.5, "current": [{"node": "n1", "gpu": 4,
                                                         "fraction": 0.5}]},
            {"name": "f", "gpu_share": 0.25},
            {"name": "g", "gpus": 1},
            {"name": "h", "gpus": 8},
            {"name": "i", "mig_profile": "2g.10gb"},
        ],
    })


def _plan(**extra: object) -> Plan:
    return Plan.model_validate({
        "status": "feasible", "solver": "hand", "objective_value": 5.0, "best_bound": 6.0,
        "gap": 0.2,
        "assignments": [
            {"job": "a", "placements": [{"node": "n1", "gpu": 0}]},
            {"job": "b", "placements": [{"node": "n1", "gpu": 2}]},
            {"job": "d", "placements": [{"node": "n1", "gpu": 3,
                                         "mig": {"profile": "3g.20gb", "start": 4}}]},
            {"job": "i", "placements": [{"node": "n1", "gpu": 3,
                                         "mig": {"profile": "2g.10gb", "start": 0}}]},
            {"job": "e", "placements": [{"node": "n1", "gpu": 4, "fraction": 0.5}]},
            {"job": "f", "placements": [{"node": "n1", "gpu": 4, "fraction": 0.25}]},
            {"job": "g", "placements": [{"node": "n2", "gpu": 1}]},
        ],
        "unplaced": [{"job": "c", "reason": "preempted", "detail": "for i"},
                     {"job": "h", "reason": "gang_too_large", "detail": "8 > 5"}],
        "preempted": ["c"], "migrated": ["b"],
        "mig_changes": [{"node": "n1", "gpu": 3, "destroy": [{"profile": "3g.20gb", "start": 0}],
                         "create": [{"profile": "2g.10gb", "start": 0},
                                    {"profile": "1g.5gb", "start": 2},
                                    {"profile": "1g.5gb", "start": 3}]}],
        **extra,
    })


def _cell(scene_cells: list[GpuCell], node: str, gpu: int) -> GpuCell:
    return next(c for c in scene_cells if (c.node, c.index) == (node, gpu))


def _spans(segs: list[Segment]) -> list[tuple[float, float, str | None, Mark]]:
    return [(s.x0, s.x1, s.job, s.mark) for s in segs]


def test_statuses_follow_the_placements() -> None:
    scene = build_scene(_request(), _plan())
    assert scene.status == {
        "a": JobStatus.kept, "b": JobStatus.migrated, "c": JobStatus.preempted,
        "d": JobStatus.kept, "e": JobStatus.kept, "f": JobStatus.started,
        "g": JobStatus.started, "h": JobStatus.waiting, "i": JobStatus.started,
    }
    assert not scene.warnings


def test_a_job_placed_elsewhere_is_migrated_even_if_the_plan_forgets_to_say_so() -> None:
    scene = build_scene(_request(), _plan(migrated=[]))
    assert scene.status["b"] == JobStatus.migrated


def test_mig_instances_sit_at_their_memory_slices() -> None:
    scene = build_scene(_request(), _plan())
    cells = [c for d in scene.domains for c in d.cells()]
    mig = _cell(cells, "n1", 3)
    assert _spans(mig.before) == [(0.0, 0.5, "c", Mark.preempted), (0.5, 1.0, "d", Mark.kept)]
    assert _spans(mig.after) == [
        (0.0, 0.25, "i", Mark.started), (0.25, 0.375, None, Mark.idle),
        (0.375, 0.5, None, Mark.idle), (0.5, 1.0, "d", Mark.kept)]
    assert mig.mig_changed and mig.changed
    [row] = scene.mig_rows
    assert (row.node, row.gpu, row.touches) == ("n1", 3, ("c",))
    assert [f"{i.profile}@{i.start}" for i in row.destroy] == ["3g.20gb@0"]
    assert [f"{i.profile}@{i.start}" for i in row.create] == ["2g.10gb@0", "1g.5gb@2",
                                                              "1g.5gb@3"]


def test_moves_shares_and_untouched_gpus() -> None:
    scene = build_scene(_request(), _plan())
    cells = [c for d in scene.domains for c in d.cells()]
    assert _spans(_cell(cells, "n1", 1).before) == [(0.0, 1.0, "b", Mark.moved_out)]
    assert _cell(cells, "n1", 1).after == []
    assert _spans(_cell(cells, "n1", 2).after) == [(0.0, 1.0, "b", Mark.moved_in)]
    shared = _cell(cells, "n1", 4)
    assert _spans(shared.before) == [(0.0, 0.5, "e", Mark.kept)]
    assert _spans(shared.after) == [(0.0, 0.5, "e", Mark.kept), (0.5, 0.75, "f", Mark.started)]
    assert shared.used_after == pytest.approx(0.75)
    kept = _cell(cells, "n1", 0)
    assert not kept.changed and _spans(kept.after) == [(0.0, 1.0, "a", Mark.kept)]
    assert not _cell(cells, "n2", 0).healthy
    moves = {(m.job, m.status, m.before, m.after) for m in scene.moves}
    assert moves == {("b", JobStatus.migrated, ("n1/1",), ("n1/2",)),
                     ("c", JobStatus.preempted, ("n1/3 3g.20gb@0",), ())}


def test_domains_group_nodes_in_request_order() -> None:
    scene = build_scene(_request(), _plan())
    assert [(d.name, [n.name for n in d.nodes]) for d in scene.domains] == [
        ("r1", ["n1"]), (NO_DOMAIN, ["n2"])]


def test_a_plan_that_disagrees_with_its_request_gives_warnings_not_errors() -> None:
    bad = _plan()
    bad.assignments.append(bad.assignments[0].model_copy(update={"job": "ghost"}))
    bad.assignments[-1].placements[0] = bad.assignments[-1].placements[0].model_copy(
        update={"node": "n9"})
    bad.unplaced = [u for u in bad.unplaced if u.job != "h"]
    bad.mig_changes.append(bad.mig_changes[0].model_copy(update={"gpu": 0}))
    scene = build_scene(_request(), bad)
    text = " | ".join(scene.warnings)
    assert "'ghost', which is not a job of the request" in text
    assert "n9/0, a GPU the request does not have" in text
    assert "'h' is neither placed nor listed as unplaced" in text
    assert "n1/0, which is not a MIG GPU" in text


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_real_plans_draw_without_overlap(seed: int) -> None:
    """On solver plans (valid by construction) every row is a set of disjoint spans inside
    the GPU, every job has a status, and the scene finds nothing to warn about."""
    request = generate_custom(gpus=48, jobs=60, seed=seed)
    request.policy = request.policy.model_copy(update={"solver": "heuristic"})
    plan = make_plan(request)
    scene = build_scene(request, plan)
    assert not scene.warnings
    assert set(scene.status) == {j.name for j in request.jobs}
    for cell in (c for d in scene.domains for c in d.cells()):
        for row in (cell.before, cell.after):
            end = 0.0
            for s in row:
                assert s.x0 >= end - 1e-9 and s.x1 <= 1 + 1e-9 and s.x1 > s.x0
                end = s.x1
    placed = {a.job for a in plan.assignments}
    assert {j for j, s in scene.status.items() if s in (JobStatus.kept, JobStatus.started,
                                                         JobStatus.migrated)} == placed
