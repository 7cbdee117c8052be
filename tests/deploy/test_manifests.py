"""deploy/: the Kubernetes manifests validate offline against the current Kubernetes schema
(kubernetes-validate, strict: unknown fields fail), refer to each other consistently, and
point at what the service really serves; the KubeSchedulerConfiguration (not in those
schemas) is checked field by field against the documented `Extender` type and against the
extender routes of a running server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from api.app import create_app
from api.k8s.state import K8sSettings
from api.k8s.watch import OBJECT_SOURCES
from api.settings import Settings
from models import BUILTIN_CATALOG
from tests.api.conftest import Server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCHEDULER = "kube-scheduler-config.yaml"
KUSTOMIZATION = "kustomization.yaml"

#: kube-scheduler's `Extender` (kubescheduler.config.k8s.io/v1) fields and their YAML types.
EXTENDER_FIELDS: dict[str, type | tuple[type, ...]] = {
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str,
    "weight": int, "bindVerb": str, "enableHTTPS": bool, "tlsConfig": dict,
    "httpTimeout": str, "nodeCacheCapable": bool, "managedResources": list,
    "ignorable": bool,
}


def _docs() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name in (SCHEDULER, KUSTOMIZATION):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def _find(kind: str) -> dict[str, Any]:
    [doc] = [d for _, d in _docs() if d["kind"] == kind]
    return doc


def _routes() -> set[tuple[str, str]]:
    """(method, path) of every route the app documents."""
    paths = create_app(Settings()).openapi()["paths"]
    return {(m.upper(), p) for p, ops in paths.items() for m in ops}


@pytest.mark.parametrize(("name", "doc"), list(_docs()),
                         ids=[f"{n}:{d['kind']}" for n, d in _docs()])
def test_manifest_validates_against_the_current_schema(name: str, doc: dict[str, Any]) -> None:
    version = str(latest_version())
    assert kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_rejects_a_typo() -> None:
    """The check above can fail: a misspelt field is an error."""
    deployment = _find("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, str(latest_version()), strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / KUSTOMIZATION).read_text())
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {SCHEDULER, KUSTOMIZATION}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_settings_and_token_are_real_gpuplan_settings() -> None:
    """Every key is a field of the service's or the extender's settings, and the values
    validate there (a typo in a name or a value fails)."""
    values = {**_find("ConfigMap")["data"], **_find("Secret")["stringData"]}
    k8s = {k.removeprefix("GPUPLAN_K8S_").lower(): v for k, v in values.items()
           if k.startswith("GPUPLAN_K8S_")}
    service = {k.removeprefix("GPUPLAN_").lower(): v for k, v in values.items()
               if not k.startswith("GPUPLAN_K8S_")}
    assert all(k.startswith("GPUPLAN_") for k in values)
    assert set(k8s) <= set(K8sSettings.model_fields), set(k8s) - set(K8sSettings.model_fields)
    assert set(service) <= set(Settings.model_fields), set(service) - set(Settings.model_fields)
    settings = Settings.model_validate(service)
    assert settings.workers >= 1 and settings.api_token is None
    assert K8sSettings.model_validate(k8s).watch is True


def test_the_deployment_wires_configmap_secret_account_and_service() -> None:
    deployment, service = _find("Deployment"), _find("Service")
    pod = deployment["spec"]["template"]
    [main] = pod["spec"]["containers"]
    assert main["envFrom"][0]["configMapRef"]["name"] == _find("ConfigMap")["metadata"]["name"]
    secret = _find("Secret")
    [ref] = [e["valueFrom"]["secretKeyRef"] for e in main["env"]
             if e["name"] == "GPUPLAN_API_TOKEN"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    account = _find("ServiceAccount")["metadata"]["name"]
    assert pod["spec"]["serviceAccountName"] == account
    binding = _find("ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == account
    assert binding["roleRef"]["name"] == _find("ClusterRole")["metadata"]["name"]
    rules = _find("ClusterRole")["rules"]
    core = [r for r in rules if r["apiGroups"] == [""]]
    assert any({"nodes", "pods"} <= set(r["resources"])
               and {"get", "list", "watch"} <= set(r["verbs"]) for r in core)
    # every object kind the watch lists is granted, so a deployed service reads them
    for source in OBJECT_SOURCES:
        assert any(source.group in r["apiGroups"] and source.plural in r["resources"]
                   and {"list", "watch"} <= set(r["verbs"]) for r in rules), source.key
    assert not any(set(r["verbs"]) - {"get", "list", "watch"} for r in rules)  # read only
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in ports


def test_probes_use_served_routes() -> None:
    routes = _routes()
    [main] = _find("Deployment")["spec"]["template"]["spec"]["containers"]
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ("GET", main[probe]["httpGet"]["path"]) in routes
    assert main["args"][:2] == ["gpuplan", "serve"]


@pytest.fixture(scope="module")
def scheduler_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / SCHEDULER).read_text())
    return config


def test_scheduler_config_fields_are_the_documented_ones(scheduler_config: dict[str, Any]
                                                         ) -> None:
    assert scheduler_config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert scheduler_config["kind"] == "KubeSchedulerConfiguration"
    [extender] = scheduler_config["extenders"]
    for key, value in extender.items():
        assert key in EXTENDER_FIELDS, f"unknown Extender field {key}"
        assert isinstance(value, EXTENDER_FIELDS[key]), key
    for key in ("urlPrefix", "filterVerb", "prioritizeVerb", "nodeCacheCapable", "ignorable"):
        assert key in extender
    assert 1 <= extender["weight"] <= 100 and extender["ignorable"] is True
    profiles = {p.name for m in BUILTIN_CATALOG.values() for p in m.mig_profiles}
    for res in extender["managedResources"]:
        assert set(res) <= {"name", "ignoredByScheduler"}
        name = res["name"]
        assert name == "nvidia.com/gpu" or name.removeprefix("nvidia.com/mig-") in profiles


def test_scheduler_config_targets_the_service(scheduler_config: dict[str, Any]) -> None:
    [extender] = scheduler_config["extenders"]
    url = urlsplit(extender["urlPrefix"])
    service = _find("Service")
    meta = service["metadata"]
    assert url.hostname == f"{meta['name']}.{meta['namespace']}.svc.cluster.local"
    assert url.port == service["spec"]["ports"][0]["port"]
    routes = _routes()
    for verb in ("filterVerb", "prioritizeVerb"):
        assert ("POST", f"{url.path}/{extender[verb]}") in routes


def test_a_running_server_answers_the_scheduler_on_those_urls(
        scheduler_config: dict[str, Any], tmp_path: Path) -> None:
    """What kube-scheduler sends with nodeCacheCapable (node names, no snapshot yet) gets a
    well-formed answer on urlPrefix/filterVerb and urlPrefix/prioritizeVerb."""
    [extender] = scheduler_config["extenders"]
    path = urlsplit(extender["urlPrefix"]).path
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "1"},
           "spec": {"containers": [{"name": "c", "resources": {
               "limits": {"nvidia.com/gpu": "1"}}}]}}
    server = Server(tmp_path, workers=1).start()
    try:
        with server.client() as c:
            filtered = c.post(f"{path}/{extender['filterVerb']}",
                              json={"Pod": pod, "NodeNames": ["n1"]})
            scores = c.post(f"{path}/{extender['prioritizeVerb']}",
                            json={"Pod": pod, "NodeNames": ["n1"]})
    finally:
        server.stop()
    assert filtered.status_code == 200, filtered.text
    assert {"Nodes", "NodeNames", "FailedNodes", "Error"} <= set(filtered.json())
    assert scores.status_code == 200 and isinstance(scores.json(), list)
