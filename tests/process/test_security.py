"""Security guarantees, one test (or one small table) each.

1. Stored data is never unpickled or evaluated: no module of stepline can (a source scan), and
   payloads that look like pickles or Python code come back as the same JSON values.
2. The API checks its token with ``hmac.compare_digest``; ``stepline serve`` refuses a
   non-loopback bind without a token.
3. SQL takes values as parameters, and the one identifier built from input (the PostgreSQL
   schema) is validated before anything is sent.
4. The dashboard shows user data as text (in Chromium) under a restrictive CSP.
5. Request bodies and URLs have size limits.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import hmac
import os
import pickle
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import psycopg
import pytest
from playwright.sync_api import Dialog, Page, expect, sync_playwright
from psycopg import sql

from stepline import (
    Engine,
    ManualClock,
    NonRetryableError,
    StepFailedError,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)
from stepline.http import create_app
from stepline.http.app import CONTENT_SECURITY_POLICY, MAX_URL
from stepline.store.postgres import split_url

from .._http_server import ServerThread
from ..conftest import EngineFactory, drain
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS

SRC = Path(__file__).parents[2] / "src" / "stepline"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _raw_rows(store_url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of a fixed query, read past stepline with the database's own driver."""
    if store_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as db:
            return list(db.execute(query))
    conninfo, schema = split_url(store_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return [tuple(row) for row in conn.execute(query.encode())]


def _tables(store_url: str) -> set[str]:
    if store_url.startswith("sqlite:///"):
        query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    else:
        query = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    return {row[0] for row in _raw_rows(store_url, query)}


# -- 1. never unpickled, never evaluated ---------------------------------------------------------

#: Modules that turn bytes into live objects (or run code on load).
UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle",
                  "jsonpickle", "joblib", "yaml"}  # fmt: skip
#: Built-ins that run or build code from a string.
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: Attribute calls that do the same (``builtins.eval``, ``ast.literal_eval``).
UNSAFE_ATTRIBUTES = {"eval", "exec", "literal_eval"}


UNSAFE_SNIPPETS = [
    "import pickle",
    "import shelve as s",
    "from marshal import loads",
    "import yaml.loader",
    "eval(text)",
    "exec(text)",
    "compile(t, 'f', 'exec')",
    "__import__(name)",
    "builtins.eval(text)",
    "ast.literal_eval(text)",
]


def unsafe_uses(source: str, filename: str) -> list[str]:
    """Where ``source`` imports a deserialiser or calls something that evaluates a string."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(name.split(".")[0] in UNSAFE_MODULES for name in names):
            found.append(f"{filename}:{node.lineno}: imports {', '.join(names)}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in UNSAFE_BUILTINS:
                found.append(f"{filename}:{node.lineno}: calls {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in UNSAFE_ATTRIBUTES:
                found.append(f"{filename}:{node.lineno}: calls .{func.attr}()")
    return found


def test_no_module_unpickles_or_evaluates() -> None:
    # The scanner itself: each of these must be found, and the harmless look-alikes not.
    for snippet in UNSAFE_SNIPPETS:
        assert unsafe_uses(snippet, "<probe>"), snippet
    assert unsafe_uses("import orjson\nre.compile('x')\norjson.loads(b)", "<probe>") == []

    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 20  # the scan looks where the code is
    found = [hit for path in modules for hit in unsafe_uses(path.read_text("utf-8"), str(path))]
    assert found == []


@workflow(name="sec-echo")
async def sec_echo(event: WorkflowEvent, step: WorkflowStep) -> Any:
    echoed = await step.do("echo", lambda: event.params)
    got = await step.wait_for_event("data", type="data", timeout="1 hour")
    return {"echoed": echoed, "event": got.payload}


class _Touch:
    """Unpickling this creates a file: proof that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


async def test_pickles_and_code_in_payloads_come_back_as_data(
    make_engine: EngineFactory, store_url: str, clock: ManualClock, tmp_path: Path
) -> None:
    marker = tmp_path / "executed"
    payload: dict[str, Any] = {
        "pickle0": pickle.dumps(_Touch(marker), protocol=0).decode("latin-1"),
        "pickle5": pickle.dumps(_Touch(marker), protocol=5).decode("latin-1"),
        "python": f"__import__('os').system('touch {marker}')",
        "jsonpickle": {"py/reduce": [{"py/function": "os.system"}, {"py/tuple": ["true"]}]},
        "yaml": f"!!python/object/apply:os.system ['touch {marker}']",
    }
    async with make_engine([sec_echo], clock=clock) as engine:
        instance = await engine.workflow("sec-echo").create("p1", payload)
        await drain(engine)
        await instance.send_event("data", payload)
        await drain(engine)
        record = await instance.record()
        steps = {s.name: s for s in await instance.steps()}
    assert record.status == "complete", record.error
    assert record.params == payload
    assert record.output == {"echoed": payload, "event": payload}
    assert steps["echo"].output == payload
    assert not marker.exists()
    # What is stored is JSON text of the value, read back without stepline.
    stored = [
        *_raw_rows(store_url, "SELECT params FROM instances"),
        *_raw_rows(store_url, "SELECT output FROM steps WHERE name = 'echo'"),
        *_raw_rows(store_url, "SELECT payload FROM events"),
    ]
    assert [orjson.loads(text) for (text,) in stored] == [payload] * 3


# -- 2. the token and the bind -------------------------------------------------------------------

TOKEN = "s3cret-token"


async def test_token_is_compared_in_constant_time(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    sha256_of_token = hashlib.sha256(TOKEN.encode()).digest()
    async with make_engine([sec_echo]) as engine:
        transport = httpx.ASGITransport(app=create_app(engine, token=TOKEN))
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            for offered, status in [
                (TOKEN[:-1] + "X", 401),  # same length, last byte wrong
                ("X" + TOKEN[1:], 401),  # same length, first byte wrong
                (TOKEN[:-1], 401),  # a prefix
                (TOKEN + "X", 401),  # longer
                (TOKEN, 200),
            ]:
                calls.clear()
                headers = {"Authorization": f"Bearer {offered}"}
                resp = await client.get("/api/workflows", headers=headers)
                assert resp.status_code == status, offered
                # The digests are compared (the server keeps only the token's SHA-256).
                expected = (hashlib.sha256(offered.encode()).digest(), sha256_of_token)
                assert calls == [expected], offered
            resp = await client.get("/api/workflows")
            assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"


def _serve(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STEPLINE_API_TOKEN", None)
    command = [sys.executable, "-m", "stepline.cli", "--database", f"sqlite:///{tmp_path}/s.db"]
    return subprocess.Popen(
        [*command, "serve", *args], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_serve_refuses_a_public_bind_without_a_token(tmp_path: Path) -> None:
    refused = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(_free_port()))
    try:
        output = refused.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        refused.kill()
        raise AssertionError(f"it served: {refused.communicate()[0]}") from None
    assert refused.returncode == 2, output
    assert "refusing to serve on '0.0.0.0' without a token" in output
    assert "--insecure" in output and "STEPLINE_API_TOKEN" in output
    assert "stepline dashboard" not in output  # nothing was started

    port = _free_port()
    # serve without --worker only opens an existing database (stepline db init creates it)
    sqlite3.connect(tmp_path / "s.db").close()
    insecure = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--insecure")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/api/workflows", timeout=2)
                break
            except httpx.TransportError:
                assert insecure.poll() is None and time.monotonic() < deadline, "not serving"
                time.sleep(0.05)
        assert resp.status_code == 200  # served, and without a token, as asked
    finally:
        insecure.send_signal(signal.SIGINT)
        output = insecure.communicate(timeout=30)[0]
    assert "WARNING: no token and not on loopback" in output


# -- 3. parameterised SQL, validated identifiers -------------------------------------------------

BAD_SCHEMAS = ['x"; DROP TABLE y; --', "public; DROP TABLE y", 'a"b', "a b", "a-b", "1abc", "",
               "a" * 64, "sch\u00e9ma", "x\n", "x'"]  # fmt: skip


def test_a_bad_schema_name_is_refused_before_connecting() -> None:
    # A listener that counts connections stands in for the server: nothing may reach it.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        base = f"postgresql://postgres@127.0.0.1:{port}/test"
        for schema in BAD_SCHEMAS:
            url = f"{base}?" + urlencode({"schema": schema})
            with pytest.raises(ValueError, match="invalid schema name") as info:
                Engine(url)
            assert repr(schema) in str(info.value)
            assert "letters, digits or underscores" in str(info.value)
            with pytest.raises(ValueError, match="invalid schema name"):
                split_url(f"{base}?schema=ok&" + urlencode({"schema": schema}))  # the last wins
        Engine(f"{base}?schema=Fine_Name_1")  # a valid name constructs (and connects lazily)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection was attempted


META = [
    "'; DROP TABLE instances; --",
    '"; DROP TABLE steps; --',
    "Robert'); DELETE FROM events WHERE ('1' = '1",
    "%s %(pk)s %% ? ?1 :name $1 {s} {}",
    "\\'; \\\\ E'\\'' $$ $tag$",
    "/* open comment -- and a line comment",
    "\u02bc\uff07\u2018\u2019 look-alike quotes; \u0130 \u00df",
]
META_IDS = ["x--", "_--", "a--b--c"]  # ids and event types allow '-', so '--' but nothing else
META_EVENT = "t--1"


def _echo(text: str) -> Any:
    return lambda: text


def _fail(texts: list[str]) -> None:
    raise NonRetryableError(" | ".join(texts))


@workflow(name="sec-meta")
async def sec_meta(event: WorkflowEvent, step: WorkflowStep) -> Any:
    texts = event.params["texts"]
    outputs = [await step.do(text, _echo(text)) for text in texts]
    try:
        await step.do(texts[0] + " fails", lambda: _fail(texts))
        error = None
    except StepFailedError as exc:
        error = exc.message
    got = await step.wait_for_event(texts[1] + " waits", type=META_EVENT, timeout="1 hour")
    return {"outputs": outputs, "error": error, "event": got.payload}


async def test_sql_metacharacters_in_every_field_round_trip(
    make_engine: EngineFactory, store_url: str, clock: ManualClock
) -> None:
    params = {"texts": META, **{text: text for text in META}}
    async with make_engine([sec_meta], clock=clock) as engine:
        tables = _tables(store_url)
        assert {"instances", "steps", "events", "workflows"} <= tables
        binding = engine.workflow("sec-meta")
        instances = [await binding.create(META_IDS[0], params)]
        instances += await binding.create_batch([{"id": i, "params": params} for i in META_IDS[1:]])
        await drain(engine)
        for instance in instances:
            await instance.send_event(META_EVENT, {"texts": META})
        await drain(engine)
        for instance in instances:
            record = await instance.record()
            assert record.status == "complete", record.error
            assert record.params == params
            assert record.output == {
                "outputs": META,
                "error": " | ".join(META),
                "event": {"texts": META},
            }
            steps = {s.name: s for s in await instance.steps()}
            assert set(steps) == {*META, META[0] + " fails", META[1] + " waits"}
            assert {text: steps[text].output for text in META} == {text: text for text in META}
            failed = steps[META[0] + " fails"].error
            assert failed is not None and failed["message"] == " | ".join(META)
        page = await engine.list_instances("sec-meta", None, 10, None)
        assert sorted(r.id for r in page.instances) == sorted(META_IDS)
        for text in META:  # as a workflow filter or a cursor: no match, or a clear error
            assert (await engine.list_instances(text, None, 10, None)).instances == []
            with pytest.raises(ValueError, match="invalid cursor"):
                await engine.list_instances(None, None, 10, text)
    assert _tables(store_url) == tables
    counts = [
        _raw_rows(store_url, f"SELECT count(*) FROM {t}")[0][0] for t in ("instances", "events")
    ]
    assert counts == [len(META_IDS), len(META_IDS)]
    steps = _raw_rows(store_url, "SELECT count(*) FROM steps")[0][0]
    assert steps == len(META_IDS) * (len(META) + 2)


# -- 4. the dashboard: user data as text, a strict CSP ------------------------------------------


def _xss(where: str) -> str:
    return f"<img src=x onerror=alert('{where}')>"


XSS = "<img src=x onerror=alert(1)>"
XSS_STEP = _xss("step")


@workflow(name="sec-xss")
async def sec_xss(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """<img src=x onerror=alert('doc')><script>alert('doc')</script>"""
    await step.do("<img src=x onerror=alert('step')>", lambda: _xss("step-output"))
    return XSS


def _fail_xss() -> None:
    raise NonRetryableError(_xss("error"))


@workflow(name="sec-xss-error")
async def sec_xss_error(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.do("explode", _fail_xss)


def _directives(policy: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


def test_content_security_policy_is_restrictive() -> None:
    policy = _directives(CONTENT_SECURITY_POLICY)
    assert policy["default-src"] == ["'self'"]
    for directive in ("script-src", "style-src"):
        assert policy[directive] == ["'self'"], directive  # no inline code, no eval, no hosts
    assert policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    assert policy["require-trusted-types-for"] == ["'script'"]
    sources = {source for values in policy.values() for source in values}
    assert sources <= {"'self'", "'none'", "'script'", "data:"}  # no hosts, schemes or wildcards


def test_dashboard_shows_user_data_as_text(tmp_path: Path) -> None:
    engine = Engine(f"sqlite:///{tmp_path}/x.db", [sec_xss, sec_xss_error], worker=True,
                    poll_interval=0.05)  # fmt: skip
    with ServerThread(create_app(engine, manage_engine=True, stream_interval=0.2)) as server:
        url = server.url
        with httpx.Client(base_url=url, timeout=10) as client:
            for path in ("/", "/index.html", "/js/app.js", "/api/workflows", "/api/nothing"):
                assert client.get(path).headers["content-security-policy"] == (
                    CONTENT_SECURITY_POLICY
                ), path
            params = {"p": _xss("params"), _xss("key"): 1}
            for workflow_name, body in (("sec-xss", {"id": "x1", "params": params}),
                                        ("sec-xss-error", {"id": "e1"})):  # fmt: skip
                assert client.post(
                    f"/api/workflows/{workflow_name}/instances", json=body
                ).is_success
            deadline = time.monotonic() + 20
            ends = [("sec-xss", "x1", "complete"), ("sec-xss-error", "e1", "errored")]
            for workflow_name, instance_id, status in ends:
                path = f"/api/workflows/{workflow_name}/instances/{instance_id}"
                while client.get(path).json()["workflow"]["status"] != status:
                    assert time.monotonic() < deadline, f"{instance_id} did not end {status}"
                    time.sleep(0.05)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                _check_pages(page, url)
            finally:
                browser.close()


def _check_pages(page: Page, url: str) -> None:
    dialogs: list[str] = []
    errors: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(20_000)
    page.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', "
        "(e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));"
    )

    page.goto(f"{url}/#/workflows/sec-xss/instances/x1")
    expect(page.locator("[data-testid=output]")).to_contain_text(XSS)
    expect(page.locator("[data-testid=params]")).to_contain_text(_xss("params"))
    expect(page.locator("[data-testid=params]")).to_contain_text(_xss("key"))
    expect(page.locator("[data-testid=steps]")).to_contain_text(XSS_STEP)
    expect(page.locator("[data-testid=timeline]")).to_contain_text(XSS_STEP)
    page.locator("[data-testid=step-row] summary").first.click()
    expect(page.locator("[data-testid=steps]")).to_contain_text(_xss("step-output"))
    _no_markup(page)

    page.goto(f"{url}/#/workflows/sec-xss-error/instances/e1")
    expect(page.locator("[data-testid=error]")).to_contain_text(_xss("error"))
    _no_markup(page)
    page.goto(f"{url}/#/instances")
    expect(page.locator("[data-testid=instance-row][data-id=e1]")).to_contain_text(_xss("error"))
    page.locator("[data-testid=search-id]").fill(_xss("search"))
    page.locator("[data-testid=search-id]").press("Enter")
    expect(page.locator("[data-testid=toast]").first).to_contain_text(_xss("search"))
    _no_markup(page)
    page.goto(f"{url}/#/workflows")
    expect(page.locator("[data-testid=workflow-sec-xss]")).to_contain_text(_xss("doc"))
    _no_markup(page)

    assert dialogs == []  # no alert() ever ran
    assert errors == []
    assert page.evaluate("window.__csp") == []  # the dashboard works under its policy
    # The policy is in force: inline script and HTML sinks are refused by the browser itself.
    ran = page.evaluate(
        "() => { const policy = trustedTypes.createPolicy('probe', {createScript: (s) => s});"
        " const s = document.createElement('script');"
        " s.textContent = policy.createScript('window.__ran = 1');"
        " document.head.append(s); return window.__ran === 1; }"
    )
    assert ran is False
    sink = page.evaluate(
        "() => { try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); return 'ok'; }"
        " catch (e) { return e.name; } }"
    )
    assert sink == "TypeError"
    page.wait_for_function("window.__csp.length >= 2")
    violations = page.evaluate("window.__csp")
    assert any(v.startswith("script-src") for v in violations), violations
    assert any(v.startswith("require-trusted-types-for") for v in violations), violations


def _no_markup(page: Page) -> None:
    for selector in ("img", "script", "b", "image", "iframe"):
        assert page.locator(f"#view {selector}, #toasts {selector}").count() == 0, selector


# -- 5. size limits ------------------------------------------------------------------------------

MAX_BODY = 4000


async def test_oversized_bodies_and_urls_are_refused(
    make_engine: EngineFactory, store_url: str, clock: ManualClock
) -> None:
    async with make_engine([sec_echo], clock=clock, max_payload=1000) as engine:
        waiting = await engine.workflow("sec-echo").create("w", {})
        await drain(engine)
        app = create_app(engine, max_body=MAX_BODY)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stepline") as client:
            create = "/api/workflows/sec-echo/instances"
            event = create + "/w/events/data"

            async def chunks() -> Any:  # no Content-Length: counted while reading
                for _ in range(10):
                    yield b" " * 1000

            big = orjson.dumps({"id": "big", "params": "y" * MAX_BODY})
            for path, content in ((create, big), (create, chunks()), (event, big)):
                resp = await client.post(path, content=content)
                assert resp.status_code == 413, resp.text
                error = resp.json()["error"]
                assert error["code"] == "payload_too_large"
                assert f"over the limit of {MAX_BODY:,} bytes" in error["message"]

            pad = "a" * 60_000  # httpx refuses URLs of 64 KiB itself; the socket test sends one
            for method, path in (("GET", "/api/workflows"), ("POST", create), ("POST", event),
                                 ("GET", "/")):  # fmt: skip
                resp = await client.request(method, f"{path}?pad={pad}", json={"id": "long"})
                assert resp.status_code == 414, resp.text
                error = resp.json()["error"]
                assert error["code"] == "uri_too_long"
                assert f"over the limit of {MAX_URL:,} bytes" in error["message"]
            resp = await client.get(f"/api/workflows?pad={'a' * (MAX_URL // 2)}")
            assert resp.status_code == 200  # under the limit
        assert (await waiting.status()).status == "waiting"
        page = await engine.list_instances("sec-echo", None, 10, None)
        assert [r.id for r in page.instances] == ["w"]
    assert _raw_rows(store_url, "SELECT count(*) FROM events") == [(0,)]


def test_a_long_url_is_refused_over_a_socket(tmp_path: Path) -> None:
    """Through uvicorn as well: its HTTP parser lets a 64 KiB request line through."""
    app = create_app(Engine(f"sqlite:///{tmp_path}/x.db", worker=False), manage_engine=True)
    target = b"/api/workflows?pad=" + b"a" * 65536
    with ServerThread(app) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 "), head
    assert orjson.loads(body)["error"]["code"] == "uri_too_long"
