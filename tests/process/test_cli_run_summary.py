"""``stepline run`` ends with a short summary: the instance's fields, one line per step, every
value cut to one line (at a fixed length, and at the terminal's width on a terminal), attempt
tables only under steps that were retried; ``--full`` prints the whole describe output. Run on
the README's main job (the document workflow of examples/documents.py)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from .test_cli import cli_env, fields

pytestmark = pytest.mark.slow

DOCUMENTS = str(Path(__file__).resolve().parents[2] / "examples" / "documents.py")
STEPS = ["parse-1", "chunk-1", "embed-1", "index-1", "summarise-1", "notify-1"]
DESCRIBE = [sys.executable, "-m", "stepline.cli", "workflows", "instances", "describe"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepline.cli", "run", DOCUMENTS + ":DocumentWorkflow", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=90,
    )


def step_lines(text: str) -> dict[str, str]:
    """The summary's step lines by step name."""
    found = re.findall(r"^  ✅ (\S+)\s+(.*)$", text, re.M)
    return {name: line for name, line in found}


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("main-job")
    short = run(root, "--id", "short")
    full = run(root, "--id", "full", "--full")
    return {"root": root, "short": short, "full": full}


def test_the_main_job_prints_a_line_per_step(main_job: dict[str, Any]) -> None:
    result = main_job["short"]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    lines = out.splitlines()
    assert len(lines) <= 20, out  # the fields, "Steps:", a line per step, the hint
    got = fields(out)
    assert got["Status"] == "✅ Completed" and got["Last Successful Step"] == "notify-1"
    assert list(step_lines(out)) == STEPS
    assert "┌" not in out  # no step was retried: no attempts table
    assert "  Name:" not in out and "Success:" not in out  # not the describe layout
    embed = step_lines(out)["embed-1"]
    assert embed.startswith("🎯 Step") and '{"model":"feature-hashing-v1"' in embed
    assert embed.endswith("…")
    for line in lines:
        assert len(line) <= 160, line  # values cut to a line, whatever the output's size
    assert got["Output"].endswith("…")
    assert lines[-1] == (
        "Every field and attempt: stepline workflows instances describe documents short "
        "(or run with --full)"
    )


def test_full_prints_the_whole_describe_output(main_job: dict[str, Any]) -> None:
    result = main_job["full"]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.findall(r"^  Name:\s+(.*)$", out, re.M) == STEPS
    assert out.count("✅ Yes") == 6
    assert len(re.findall(r"│ Start\s+│ End\s+│ Duration\s+│ State\s+│", out)) == 6
    assert "(or run with --full)" not in out
    described = subprocess.run(
        [*DESCRIBE, "documents", "full", "--truncate-output-limit", "300"],
        cwd=main_job["root"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert described.returncode == 0, described.stderr
    # the same layout as describe, but for the durations of steps still counted up to now
    assert re.sub(r"Duration:.*", "", out) == re.sub(r"Duration:.*", "", described.stdout)


def test_json_is_unchanged_by_the_summary(tmp_path: Path) -> None:
    result = run(tmp_path, "--id", "as-json", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [step["name"] for step in data["steps"]] == STEPS
    assert len(data["steps"][2]["output"]["vectors"]) == data["output"]["chunks"]


def test_on_a_terminal_every_line_fits_its_width(tmp_path: Path) -> None:
    """On an 80-column terminal no line of the summary wraps: long ones end in an ellipsis."""
    leader, follower = pty.openpty()
    env = cli_env(COLUMNS="80", LINES="24", TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", "run", DOCUMENTS + ":DocumentWorkflow"],
        cwd=tmp_path,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=90) == 0
    text = ANSI.sub("", b"".join(chunks).decode()).replace("\r", "")
    lines = [line for line in text.split("\n") if line]
    assert len(lines) <= 20, text
    assert [line for line in lines if cell_len(line) > 80] == [], text
    assert re.search(r"^  ✅ embed-1 .*…$", text, re.M), text


def shape(text: str) -> list[list[str]]:
    """Each line's parts that do not change from run to run: a field's label, a step's state,
    name and type, the hint's command up to the instance id."""
    found = []
    for line in text.splitlines():
        parts = re.split(r" {2,}", line)
        if line.startswith("  "):
            found.append(parts[1:3])
        elif line.startswith("Every field"):
            found.append([line.rpartition(" documents ")[0]])
        else:
            found.append(parts[:1])
    return found


def test_the_readme_shows_what_the_main_job_prints(main_job: dict[str, Any]) -> None:
    readme = (Path(DOCUMENTS).parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("In a checkout at `/tmp/stepline` it prints:\n\n```\n")[1]
    shown = block.split("```")[0]
    assert shape(shown) == shape(main_job["short"].stdout)
    assert fields(shown)["Status"] == "✅ Completed"
