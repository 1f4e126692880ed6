"""Serving: the bind-address check, ``stepline serve`` as a click command and as a real
process with a project and an in-process worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stepline import ConfigError
from stepline.access import Token, TokenSet, digest
from stepline.http import check_bind, is_loopback
from stepline.http.command import redact, serve_command


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_bind_needs_a_token_or_insecure() -> None:
    with pytest.raises(ConfigError, match="--insecure"):
        check_bind("0.0.0.0", None, False)
    check_bind("0.0.0.0", "token", False)
    with pytest.raises(ConfigError, match="--insecure"):
        check_bind("0.0.0.0", TokenSet(), False)
    check_bind("0.0.0.0", TokenSet([Token("ci", "read", digest("x"))]), False)
    check_bind("0.0.0.0", None, True)
    check_bind("127.0.0.1", None, False)


def test_serve_command_refuses_bad_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    env = {"STEPLINE_API_TOKEN": ""}
    result = runner.invoke(serve_command, ["--host", "0.0.0.0"], env=env)
    assert result.exit_code == 2
    assert "refusing to serve on '0.0.0.0' without a token" in result.output
    monkeypatch.chdir(tmp_path)  # no stepline.toml here: no workflows configured
    result = runner.invoke(serve_command, ["--worker"], env=env)
    assert result.exit_code == 2
    assert "--worker needs workflows to run" in result.output
    result = runner.invoke(serve_command, [], env=env | {"STEPLINE_EVENT_LOOP": "trio"})
    assert result.exit_code == 2
    assert "STEPLINE_EVENT_LOOP='trio' is not one of auto, uvloop, asyncio" in result.output
    assert "stepline dashboard" not in result.output  # stopped before anything started


def test_redact_hides_passwords() -> None:
    assert redact("postgresql://bob:hunter2@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert redact("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PROJECT_FLOWS = """
from stepline import workflow

@workflow(name="hello")
async def hello(event, step):
    name = await step.do("name", lambda: (event.params or {}).get("name", "world"))
    return f"hello {name}"
"""


@pytest.mark.slow
def test_stepline_serve_with_a_project_and_a_worker(tmp_path: Path) -> None:
    """``stepline --config ... serve --worker`` through the real CLI: the configured workflow
    is registered and run in-process, the token is required, Ctrl-C stops it cleanly."""
    (tmp_path / "flows.py").write_text(PROJECT_FLOWS, encoding="utf-8")
    (tmp_path / "stepline.toml").write_text(
        'database = "sqlite:///served.db"\n\n[[workflows]]\nname = "hello"\n'
        'class_name = "flows:hello"\n\n[worker]\npoll_interval = "0.05 seconds"\n',
        encoding="utf-8",
    )
    port = _free_port()
    env = {**os.environ, "STEPLINE_API_TOKEN": "tok", "PYTHONUNBUFFERED": "1"}
    env.pop("STEPLINE_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "--config", str(tmp_path / "stepline.toml"),
         "serve", "--port", str(port), "--worker"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    good = {"Authorization": "Bearer tok"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                resp = httpx.get(f"{base}/api/workflows", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.communicate()[0].decode()) from None
                time.sleep(0.05)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"
        resp = httpx.get(f"{base}/api/workflows", headers=good, timeout=5)
        assert [wf["name"] for wf in resp.json()["workflows"]] == ["hello"]
        resp = httpx.post(
            f"{base}/api/workflows/hello/instances",
            json={"id": "h1", "params": {"name": "Ada"}},
            headers=good,
            timeout=5,
        )
        assert resp.status_code == 201
        while True:
            detail = httpx.get(f"{base}/api/workflows/hello/instances/h1", headers=good).json()
            if detail["workflow"]["status"] == "complete" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert detail["workflow"]["output"] == "hello Ada"
        assert httpx.get(f"{base}/", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, output  # Ctrl-C is a clean stop
    assert f"{base}/" in output and "API token required" in output
    assert f"CLOUDFLARE_API_BASE_URL={base}/client/v4" in output
    assert f"sqlite:///{tmp_path.resolve()}/served.db (config)" in output
    assert "worker: running hello" in output
    assert "Application shutdown complete" in output
    assert (tmp_path / "served.db").exists()


def _project(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(PROJECT_FLOWS, encoding="utf-8")
    config = tmp_path / "stepline.toml"
    config.write_text(
        'database = "sqlite:///served.db"\n\n[[workflows]]\nname = "hello"\n'
        'class_name = "flows:hello"\n',
        encoding="utf-8",
    )
    return config


def _serve_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("STEPLINE_DATABASE_URL", "STEPLINE_API_TOKEN", "STEPLINE_TOKENS"):
        env.pop(name, None)
    return env


def test_serve_on_a_port_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    """The port is taken: one line and exit code 2, before any banner, and nothing started
    (the worker's database is not even created)."""
    config = _project(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "stepline.cli", "--config", str(config), "serve",
             "--port", str(port), "--worker"],
            cwd=tmp_path, env=_serve_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert not result.stdout
    assert result.stderr.splitlines() == [
        f"Error: cannot serve on 127.0.0.1:{port}: the port is in use (by another "
        "`stepline serve`?); stop what listens there, or choose another --port"
    ]
    assert not (tmp_path / "served.db").exists()


def test_serve_prints_its_banner_once_listening(tmp_path: Path) -> None:
    """When the banner names the URL, a connection to it succeeds at once (no retry)."""
    config = _project(tmp_path)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "--config", str(config), "serve",
         "--port", str(port), "--worker"],
        cwd=tmp_path, env=_serve_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"stepline dashboard: http://127.0.0.1:{port}/"), line
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert httpx.get(f"http://127.0.0.1:{port}/api/workflows", timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output


def test_serve_with_a_worker_on_a_directory_says_so_in_one_line(tmp_path: Path) -> None:
    config = _project(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "stepline.cli", "--config", str(config), "--database",
         f"sqlite:///{tmp_path}", "serve", "--port", "0", "--worker"],
        cwd=tmp_path, env=_serve_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: {tmp_path} is a directory, not a SQLite database file (from --database): name "
        f"a file in it, e.g. sqlite:///{tmp_path}/stepline.db"
    ]


def test_serve_takes_tokens_from_stepline_toml_and_the_environment(tmp_path: Path) -> None:
    """A read token from [http] tokens, an admin one from $STEPLINE_TOKENS; a broken token
    configuration stops the server with one line naming the key."""
    config = _project(tmp_path)
    with config.open("a", encoding="utf-8") as out:
        out.write(
            f'\n[http]\ntokens = [{{name = "ci", role = "read", sha256 = "{digest("r")}"}}]\n'
        )
    port = _free_port()
    env = _serve_env() | {"STEPLINE_TOKENS": f"ops:admin:{digest('a')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "--config", str(config), "serve",
         "--port", str(port), "--host", "0.0.0.0", "--worker"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(4)]
        assert any("API token required" in line and "ci (read), ops (admin)" in line
                   for line in banner), banner  # fmt: skip
        url = f"http://127.0.0.1:{port}/api"
        read, admin = {"Authorization": "Bearer r"}, {"Authorization": "Bearer a"}
        assert httpx.get(f"{url}/whoami", headers=read, timeout=30).json()["role"] == "read"
        made = httpx.post(f"{url}/workflows/hello/instances", json={}, headers=read, timeout=30)
        assert made.status_code == 403 and made.json()["error"]["code"] == "forbidden"
        made = httpx.post(f"{url}/workflows/hello/instances", json={}, headers=admin, timeout=30)
        assert made.status_code == 201
        assert httpx.get(f"{url}/workflows", timeout=30).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    config.write_text(config.read_text().replace('role = "read"', 'role = "reader"'))
    result = subprocess.run(
        [sys.executable, "-m", "stepline.cli", "--config", str(config), "serve"],
        cwd=tmp_path, env=_serve_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().endswith("invalid role 'reader' of token 'ci': use one of "
                                          "'read', 'operate', 'admin'"), result.stderr  # fmt: skip
    assert "key 'http.tokens'[0]" in result.stderr
