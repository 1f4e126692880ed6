"""Roles on every route: a table test that enumerates ALL routes of the app (the JSON API and
Cloudflare's), so a route added without a row in stepline.http.roles fails here; 403 bodies on
both APIs; /api/whoami; several tokens at once."""

from __future__ import annotations

import hmac
import re
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from stepline import Engine
from stepline.access import ROLES, Role, Token, TokenSet, allows, digest
from stepline.http import create_app
from stepline.http.roles import ROUTE_ROLES

from ..conftest import EngineFactory

SECRETS: dict[Role, str] = {role: f"secret-{role}-token" for role in ROLES}
TOKENS = [Token(f"t-{role}", role, digest(secret)) for role, secret in SECRETS.items()]
PREFIX = "/client/v4"


def routes_of(app: Starlette) -> Iterator[tuple[str, str, str]]:
    """(area, path within the area, method) of every route of the app's two APIs."""
    for mount in app.routes:
        if not isinstance(mount, Mount) or mount.path not in ("/api", PREFIX):
            continue
        area = "api" if mount.path == "/api" else "cloudflare"
        for route in mount.routes:
            assert isinstance(route, Route)
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    yield area, route.path, method


@pytest.fixture
async def client(make_engine: EngineFactory) -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    async with make_engine(()) as engine:
        app = create_app(engine, tokens=TOKENS)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as http:
            http.app = app  # type: ignore[attr-defined]
            yield engine, http


def auth(role: Role) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[role]}"}


def concrete(path: str) -> str:
    """The path with every parameter filled by a name nothing has."""
    return re.sub(r"\{[a-z_]+\}", "nothing-here", path)


async def test_every_route_has_a_role_and_every_row_a_route(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    app = client[1].app  # type: ignore[attr-defined]
    routed = set(routes_of(app))
    assert len(routed) > 40  # both APIs were found
    tabled = {
        (area, path, method)
        for area, paths in ROUTE_ROLES.items()
        for path, methods in paths.items()
        for method in methods
    }
    assert routed - tabled == set(), "routes without a role in stepline.http.roles"
    assert tabled - routed == set(), "rows of stepline.http.roles without a route"


async def test_each_role_gets_403_exactly_where_it_is_too_weak(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    _, http = client
    checked = 0
    for area, path, method in routes_of(http.app):  # type: ignore[attr-defined]
        needed = ROUTE_ROLES[area][path][method]
        url = ("/api" if area == "api" else PREFIX) + concrete(path)
        for role in ROLES:
            resp = await http.request(method, url, headers=auth(role))
            where = f"{method} {url} as {role} (needs {needed})"
            if allows(role, needed):
                assert resp.status_code not in (401, 500), where
                assert "needs role" not in resp.text, where  # 403 of its own: /user has none
            else:
                assert resp.status_code == 403, where
                if area == "api":
                    error = resp.json()["error"]
                    assert error["code"] == "forbidden"
                    assert f"'t-{role}'" in error["message"] and f"'{needed}'" in error["message"]
                else:
                    body = resp.json()
                    assert body["success"] is False
                    assert body["errors"][0]["code"] == 10000
                    assert f"'{needed}'" in body["errors"][0]["message"]
                checked += 1
    assert checked > 20


async def test_the_roles_match_the_issue(client: tuple[Engine, httpx.AsyncClient]) -> None:
    api = ROUTE_ROLES["api"]
    one = "/workflows/{name}/instances/{id}"
    assert api["/workflows"]["GET"] == api[one]["GET"] == "read"
    assert api["/workflows/{name}/instances"]["POST"] == "operate"
    assert api[one + "/status"]["PATCH"] == api[one + "/events/{type}"]["POST"] == "operate"
    assert api[one]["DELETE"] == "admin"
    assert api["/schedules"]["POST"] == api["/schedules/{name}"]["DELETE"] == "admin"
    assert api["/schedules"]["GET"] == "read"


async def test_whoami_names_the_token_and_its_roles(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    _, http = client
    for role in ROLES:
        body = (await http.get("/api/whoami", headers=auth(role))).json()
        assert body == {
            "name": f"t-{role}",
            "role": role,
            "roles": list(ROLES[: ROLES.index(role) + 1]),
            "secured": True,
        }
    assert (await http.get("/api/whoami")).status_code == 401
    assert (await http.get("/metrics", headers=auth("read"))).status_code in (200, 404)


async def test_an_open_api_is_admin_and_the_single_token_is_admin(
    make_engine: EngineFactory,
) -> None:
    async with make_engine(()) as engine:
        for app, headers in (
            (create_app(engine), {}),
            (create_app(engine, token="only"), {"Authorization": "Bearer only"}),
        ):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
                body = (await http.get("/api/whoami", headers=headers)).json()
                assert body["role"] == "admin"
                resp = await http.delete("/api/schedules/nothing-here", headers=headers)
                assert resp.status_code == 404  # allowed, then not found


async def test_a_read_token_changes_nothing(client: tuple[Engine, httpx.AsyncClient]) -> None:
    engine, http = client
    body = {"name": "nightly", "workflow": "x", "cron": "0 2 * * *"}
    resp = await http.post("/api/schedules", json=body, headers=auth("read"))
    assert resp.status_code == 403
    assert await engine.schedules().list() == []


def test_the_token_set_compares_digests_and_refuses_duplicates() -> None:
    tokens = TokenSet(TOKENS)
    assert tokens.identify(SECRETS["operate"].encode()) == TOKENS[1]
    assert tokens.identify(b"secret-operate-tokenX") is None
    assert tokens.identify(b"") is None
    assert not TokenSet()
    with pytest.raises(ValueError, match="two API tokens are named 't-read'"):
        TokenSet([TOKENS[0], Token("t-read", "admin", digest("other"))])
    with pytest.raises(ValueError, match="'again' has the same sha256 as 't-read'"):
        TokenSet([TOKENS[0], Token("again", "admin", TOKENS[0].sha256)])


def test_every_digest_is_compared_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    tokens = TokenSet(TOKENS)
    for secret in (SECRETS["read"], SECRETS["admin"], "nobody"):
        calls.clear()
        tokens.identify(secret.encode())
        assert len(calls) == len(TOKENS), secret  # no early exit on the first match
        assert all(len(a) == len(b) == 32 for a, b in calls)


async def test_a_bulk_job_names_the_token_that_started_it(
    client: tuple[Engine, httpx.AsyncClient],
) -> None:
    _, http = client
    body = {"action": "pause", "where": "id = 'a'"}
    started = await http.post("/api/bulk", json=body, headers=auth("admin"))
    assert started.status_code == 201, started.text
    assert started.json()["started_by"] == "t-admin"
    job = await http.get(f"/api/bulk/{started.json()['id']}", headers=auth("read"))
    assert job.json()["started_by"] == "t-admin"
