"""The fairness demands and the compile cache of the compiled instance."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

import models.cache as cache
import models.objective as objective
from models import PlanRequest
from models.instance import compile_jobs, forget_compiled
from models.objective import evaluate, tenant_demands


def _running_request(nodes: int, per_node: int = 8) -> PlanRequest:
    """`nodes` x `per_node` V100s, each running a one-GPU job of one of three tenants."""
    node_list = [{"name": f"n{i}", "gpus": [{"index": g, "model": "V100-32GB"}
                                            for g in range(per_node)]}
                 for i in range(nodes)]
    jobs: list[dict[str, Any]] = [
        {"name": f"j{i}-{g}", "gpus": 1, "tenant": f"t{(i + g) % 3}",
         "current": [{"node": f"n{i}", "gpu": g}]}
        for i in range(nodes) for g in range(per_node)]
    jobs.append({"name": "new", "gpus": 1, "tenant": "t0"})
    return PlanRequest.model_validate({"cluster": {"nodes": node_list}, "jobs": jobs,
                                       "policy": {"objective": "fairness"}})


def test_tenant_demands_values() -> None:
    """D_k sums each job's best value; a running job's own model counts."""
    req = _running_request(2, 3)
    demands = tenant_demands(req)
    # 7 one-GPU V100 jobs of weight 1 at V100 speed 0.40, split 3 / 2 / 2 over t0, t1, t2.
    counts = {"t0": 3, "t1": 2, "t2": 2}
    assert demands == {t: pytest.approx(0.40 * c) for t, c in counts.items()}


def test_tenant_demands_build_the_gpu_map_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU map of the cluster is built once per call, not once per running job (the
    fairness objective calls this on every evaluation: per-job rebuilds are quadratic)."""
    calls = 0
    real = objective.gpu_models_of

    def counting(request: PlanRequest) -> dict[tuple[str, int], str]:
        nonlocal calls
        calls += 1
        return real(request)

    monkeypatch.setattr(objective, "gpu_models_of", counting)
    req = _running_request(64)  # 512 running jobs
    tenant_demands(req)
    assert calls <= 1
    calls = 0
    evaluate(req, {j.name: j.current for j in req.jobs if j.current})
    assert calls <= 2  # evaluate's own map and tenant_demands'


def test_compile_cache_shared_between_threads() -> None:
    """Many threads compiling a few requests get each request's own, consistent jobs and
    the cache never grows past its size."""
    forget_compiled()
    requests = [_running_request(2 + k, 2) for k in range(6)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(seed: int) -> None:
        try:
            barrier.wait()
            for step in range(200):
                req = requests[(seed + step) % len(requests)]
                infos = compile_jobs(req)
                assert [i.name for i in infos] == [j.name for j in req.jobs]
                if step % 50 == 0:
                    forget_compiled(req)
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache._COMPILED) <= cache._COMPILED_MAX


def test_compile_cache_drops_collected_requests() -> None:
    """A collected request's entry goes at the next access; a live one is served."""
    forget_compiled()
    req = _running_request(1, 2)
    first = compile_jobs(req)
    assert compile_jobs(req) is first
    gone = _running_request(1, 1)
    compile_jobs(gone)
    key = id(gone)
    del gone
    gc.collect()
    compile_jobs(req)
    assert key not in cache._COMPILED or cache._COMPILED[key][0]() is not None
    assert compile_jobs(req) is first
