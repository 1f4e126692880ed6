"""The real ``wrangler`` CLI from the npm registry, installed once into a cache folder and run
against a stepline server with nothing leaving this machine.

:data:`WRANGLER_VERSION` is the one place the tested version is pinned: the newest release that
runs on Node.js 20 (later ones require Node.js 22). Without Node.js the tests are skipped with a
message, except where ``STEPLINE_REQUIRE_NODE=1`` (``.ci/run``), where they fail.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

WRANGLER_VERSION = "4.86.0"
MIN_NODE = (20, 3)
CACHE = Path(os.environ.get("STEPLINE_TEST_CACHE", Path.home() / ".cache" / "stepline-tests"))


def _node_version(node: str) -> tuple[int, ...]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    return tuple(int(part) for part in out.strip().lstrip("v").split(".")[:2])


def require_node() -> str:
    """The path of ``node`` (20.3 or newer); skips the test (fails under ``.ci/run``) else."""
    node = shutil.which("node")
    problem = None
    if node is None or shutil.which("npm") is None:
        problem = "Node.js (node and npm) is not installed"
    elif _node_version(node) < MIN_NODE:
        problem = f"Node.js {'.'.join(map(str, _node_version(node)))} is older than 20.3"
    if problem is None and node is not None:
        return node
    message = (
        f"WRANGLER TESTS NOT RUN: {problem}; wrangler {WRANGLER_VERSION} needs Node.js 20.3+ "
        "(install it, e.g. from your distribution or nodejs.org, and rerun)"
    )
    if os.environ.get("STEPLINE_REQUIRE_NODE") == "1":
        pytest.fail(message)
    pytest.skip(message)


def install_wrangler() -> Path:
    """The ``wrangler`` executable, installed with npm into the cache on first use (a lock
    keeps parallel runs from installing it twice)."""
    require_node()
    folder = CACHE / f"wrangler-{WRANGLER_VERSION}"
    executable = folder / "node_modules" / ".bin" / "wrangler"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not executable.exists():
            npm = [
                "npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund",
                "--loglevel=error", f"wrangler@{WRANGLER_VERSION}",
            ]  # fmt: skip
            done = subprocess.run(npm, capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not executable.exists():
                pytest.fail(f"npm could not install wrangler {WRANGLER_VERSION}:\n{done.stderr}")
    return executable


def wrangler_env(base_url: str, token: str, home: Path, account_id: str | None) -> dict[str, str]:
    """The environment of a wrangler run: the server, the token, the account, and every switch
    that keeps it off the network (metrics, error reports, update checks) and out of ``~``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CLOUDFLARE_", "CF_", "WRANGLER_"))
    }
    env |= {
        "CLOUDFLARE_API_BASE_URL": base_url,
        "CLOUDFLARE_API_TOKEN": token,
        "WRANGLER_SEND_METRICS": "false",
        "WRANGLER_SEND_ERROR_REPORTS": "false",
        "WRANGLER_HIDE_BANNER": "true",  # the banner is what checks for a newer version
        # The update check on an unexpected error asks npm's registry: point it nowhere.
        "npm_config_registry": "http://127.0.0.1:9/",
        "XDG_CONFIG_HOME": str(home / "config"),
        "HOME": str(home),
        "CI": "1",
        "NO_COLOR": "1",
        "FORCE_COLOR": "0",
    }
    if account_id is not None:
        env["CLOUDFLARE_ACCOUNT_ID"] = account_id
    return env
