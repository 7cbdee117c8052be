"""deploy/ha/: the two-replica overlay. Its own manifests validate strictly; its patches,
merged onto the base the way kustomize's strategic merge does (maps merged, lists of named
items merged by name, `$patch: replace` honoured), give manifests that validate too and
wire the database Secret, the lease and shutdown settings and the rollout."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from api.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HA = DEPLOY / "ha"


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def _merge(base: Any, patch: Any) -> Any:
    """Strategic merge of `patch` onto `base`, for the shapes these manifests use."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = dict(base) if isinstance(base, dict) else {}
        for k, v in patch.items():
            out[k] = _merge(out.get(k), v)
        return out
    if isinstance(patch, list) and isinstance(base, list) and \
            all(isinstance(x, dict) and "name" in x for x in base + patch):
        merged = {x["name"]: x for x in base}
        for x in patch:
            merged[x["name"]] = _merge(merged.get(x["name"]), x)
        return list(merged.values())
    return copy.deepcopy(patch)


def _base(kind: str) -> dict[str, Any]:
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                return dict(doc)
    raise AssertionError(f"no {kind} in deploy/")


def _overlay() -> dict[str, dict[str, Any]]:
    """The overlay's objects by kind: patched base objects and its own resources."""
    k = _load(HA / "kustomization.yaml")
    assert k["resources"][0] == "../"
    out: dict[str, dict[str, Any]] = {}
    for name in k["resources"][1:]:
        doc = _load(HA / name)
        out[doc["kind"]] = doc
    for p in k["patches"]:
        patch = _load(HA / p["path"])
        base = _base(patch["kind"])
        assert base["metadata"]["name"] == patch["metadata"]["name"]
        assert base["metadata"]["namespace"] == patch["metadata"]["namespace"]
        out[patch["kind"]] = _merge(base, patch)
    return out


@pytest.mark.parametrize("kind", ["Deployment", "ConfigMap", "Service", "Secret",
                                  "PodDisruptionBudget"])
def test_overlay_objects_validate(kind: str) -> None:
    assert kubernetes_validate.validate(_overlay()[kind], str(latest_version()), strict=True)


def test_two_replicas_share_the_database_secret_and_roll_safely() -> None:
    objs = _overlay()
    dep = objs["Deployment"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    [main] = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in main["env"]}
    ref = env["GPUPLAN_DB_URL"]["valueFrom"]["secretKeyRef"]
    secret = objs["Secret"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    assert secret["stringData"]["GPUPLAN_DB_URL"].startswith("postgresql://")
    assert "GPUPLAN_API_TOKEN" in env  # the base's env is kept
    pdb = objs["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()
    assert pdb["spec"]["minAvailable"] == 1


def test_settings_are_real_and_the_pod_outlives_its_drain() -> None:
    objs = _overlay()
    data = {**objs["ConfigMap"]["data"], **objs["Secret"]["stringData"]}
    service = {k.removeprefix("GPUPLAN_").lower(): v for k, v in data.items()
               if k.startswith("GPUPLAN_") and not k.startswith("GPUPLAN_K8S_")}
    assert set(service) <= set(Settings.model_fields), set(service) - set(Settings.model_fields)
    settings = Settings.model_validate(service)
    assert settings.database_url.startswith("postgresql://")
    grace = objs["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > settings.shutdown_delay_s + settings.shutdown_grace_s
