"""Bearer-token auth on /v1 routes (health routes stay open) and CORS, on the live server
running the real solver with a token."""

from __future__ import annotations

import pytest

from tests.api.conftest import TOKEN, Server


def v1_operations(server: Server) -> list[tuple[str, str]]:
    """Every /v1 (method, path) of the live OpenAPI document, path parameters filled."""
    with server.client() as c:
        spec = c.get("/openapi.json").json()
    ops = [(method.upper(), path.replace("{solve_id}", "some-id").replace("{model}", "A30-24GB"))
           for path, item in spec["paths"].items() if path.startswith("/v1/")
           for method in item]
    assert {p for _, p in ops} >= {"/v1/plans", "/v1/solves", "/v1/solves/some-id",
                                   "/v1/validate", "/v1/catalog/gpus"}
    assert any(p.startswith("/v1/k8s/") for _, p in ops)
    return ops


@pytest.mark.parametrize("token", [None, "wrong", TOKEN[:-1], TOKEN + "x"])
def test_v1_needs_the_token(real_server: Server, token: str | None) -> None:
    with real_server.client(token) as c:
        for method, path in v1_operations(real_server):
            r = c.request(method, path, json={})
            assert r.status_code == 401, (method, path)
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["code"] == "unauthorized"


def test_right_token_passes(real_server: Server) -> None:
    with real_server.client(TOKEN) as c:
        assert c.get("/v1/catalog/gpus").status_code == 200
        assert c.get("/v1/solves/some-id").status_code == 404
        empty = {"cluster": {"nodes": []}, "policy": {"time_limit_s": 1}}
        assert c.post("/v1/plans", json=empty).status_code == 200
    with real_server.client() as c:
        basic = c.get("/v1/solves", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401


def test_health_and_docs_stay_open(real_server: Server) -> None:
    with real_server.client() as c:
        for path in ("/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json"):
            assert c.get(path).status_code == 200, path


def test_cors_only_for_configured_origins(real_server: Server, fake_server: Server) -> None:
    preflight = {"Origin": "https://ops.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    with real_server.client() as c:
        ok = c.options("/v1/plans", headers=preflight)
        other = c.options("/v1/plans", headers={**preflight, "Origin": "https://evil.example"})
        simple = c.get("/healthz", headers={"Origin": "https://ops.example"})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "https://ops.example"
    assert "access-control-allow-origin" not in other.headers
    assert simple.headers["access-control-allow-origin"] == "https://ops.example"
    with fake_server.client() as c:  # no origins configured: no CORS headers at all
        r = c.get("/healthz", headers={"Origin": "https://ops.example"})
    assert "access-control-allow-origin" not in r.headers


def test_auth_off_needs_no_token(fake_server: Server) -> None:
    with fake_server.client() as c:
        assert c.get("/v1/catalog/gpus").status_code == 200
