"""The examples run for real: ``stepline run`` of both to completion, the document pipeline's
outputs (index, summaries, notification), its rollback, and the pure functions of doclib."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_doclib() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doclib_under_test", EXAMPLES / "doclib.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


doclib = load_doclib()


def cli_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STEPLINE_DATABASE_URL", "FORCE_COLOR", "NO_COLOR")
    }
    env["PYTHONUTF8"] = "1"
    # Cache bytecode outside the source tree so each subprocess does not recompile stepline.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "stepline-test-pycache")
    return env


def start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stepline.cli", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def fields(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([A-Z][A-Za-z ]*?):\s{2,}(.*)$", line)
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2)
    return found


def step_names(text: str) -> list[str]:
    """The steps of ``stepline run``'s summary, a line each: state, name, type, ..."""
    return re.findall(r"^  \S+ (.+?)  +\S+ (?:Step|Sleeping|Rollback)", text, re.M)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both examples and a failing document run, started together to save time."""
    root = tmp_path_factory.mktemp("examples")
    failing_out = root / "failing-out"
    failing_out.mkdir()
    (failing_out / "notifications").write_text("not a directory", encoding="utf-8")
    procs = {
        "documents": start(
            root,
            "run",
            str(EXAMPLES / "documents.py") + ":DocumentWorkflow",
            json.dumps({"out": str(root / "out"), "user": "ada@example.com"}),
            "--id",
            "docs-1",
        ),
        "starter": start(
            root,
            "run",
            str(EXAMPLES / "workflows_starter.py") + ":MyWorkflow",
            '{"email": "ada@example.com", "metadata": {"plan": "pro"}}',
            "--id",
            "starter-1",
        ),
        "failing": start(
            root,
            "run",
            str(EXAMPLES / "documents.py") + ":DocumentWorkflow",
            json.dumps({"out": str(failing_out)}),
            "--id",
            "docs-2",
        ),
    }
    yield {"root": root, **{name: finish(proc) for name, proc in procs.items()}}


# -- the documents example ----------------------------------------------------------------------


@pytest.mark.slow
def test_documents_example_runs_to_completion(runs: dict[str, Any]) -> None:
    code, out, err = runs["documents"]
    assert code == 0, err
    got = fields(out)
    assert got["Workflow Name"] == "documents"
    assert got["Instance Id"] == "docs-1"
    assert got["Status"] == "✅ Completed"
    assert got["Last Successful Step"] == "notify-1"
    assert step_names(out) == [
        "parse-1",
        "chunk-1",
        "embed-1",
        "index-1",
        "summarise-1",
        "notify-1",
    ]
    assert len(re.findall(r"^  ✅ ", out, re.M)) == 6
    # The output as stored: the describe above shortens long values, and this one holds paths
    # under the test's temporary directory, whose length varies (pytest-xdist adds to it).
    code, stored, err = finish(
        start(runs["root"], "workflows", "instances", "describe", "documents", "docs-1", "--json")
    )
    assert code == 0, err
    output = json.loads(stored)["output"]
    assert output["documents"] == 4
    assert output["chunks"] >= 4
    assert output["titles"] == [
        "Durable execution",
        "Retries and backoff",
        "Sourdough bread at home",
        "SQLite write-ahead logging",
    ]


@pytest.mark.slow
def test_documents_example_writes_a_searchable_index_and_a_notification(
    runs: dict[str, Any],
) -> None:
    assert runs["documents"][0] == 0
    out = runs["root"] / "out"
    notification = json.loads((out / "notifications" / "docs-1.json").read_text("utf-8"))
    assert notification["to"] == "ada@example.com"
    assert notification["subject"] == "4 documents are ready to search"
    summaries = {d["document"]: d["summary"] for d in notification["documents"]}
    source = (EXAMPLES / "documents" / "sqlite-wal.txt").read_text("utf-8")
    flat = " ".join(source.split())
    assert summaries["sqlite-wal.txt"]
    for sentence in doclib.split_sentences(summaries["sqlite-wal.txt"]):
        assert sentence in flat  # extractive: sentences of the document itself

    with sqlite3.connect(out / "index.db") as conn:
        documents = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert documents == 4 and chunks >= 4

    queries = {
        "how should a failing call be retried with exponential backoff": "retries-and-backoff.md",
        "bake the loaf crust in a hot pot with steam": "sourdough-bread.txt",
        "write-ahead log checkpoint, readers and one writer": "sqlite-wal.txt",
        "replay finished steps after a crash, deterministic code": "durable-execution.md",
    }
    for query, expected in queries.items():
        hits = doclib.search(out / "index.db", query, 1)
        assert hits[0]["document"] == expected, (query, hits)


@pytest.mark.slow
def test_documents_search_command(runs: dict[str, Any]) -> None:
    assert runs["documents"][0] == 0
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "documents.py"),
            "search",
            str(runs["root"] / "out" / "index.db"),
            "sourdough starter feeding",
            "--limit",
            "2",
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(hits) == 2
    assert hits[0]["document"] == "sourdough-bread.txt"
    assert hits[0]["score"] >= hits[1]["score"]


@pytest.mark.slow
def test_documents_failure_rolls_back_the_index(runs: dict[str, Any]) -> None:
    code, out, err = runs["failing"]
    assert code == 1, err
    got = fields(out)
    assert got["Status"] == "❌ Errored"
    assert got["Error"].startswith("FileExistsError:")
    assert got["Rollback"] == "✅ Rolled back"
    assert "index:rollback-1" in step_names(out)
    assert "⏪ Rollback" in out
    assert out.count("FileExistsError") >= 3  # three notify attempts, then the instance error
    assert doclib.search(runs["root"] / "failing-out" / "index.db", "sourdough") == []


# -- the starter --------------------------------------------------------------------------------


@pytest.mark.slow
def test_workflows_starter_runs_with_a_sleep_and_retries(runs: dict[str, Any]) -> None:
    code, out, err = runs["starter"]
    assert code == 0, err
    got = fields(out)
    assert got["Workflow Name"] == "workflows-starter"
    assert got["Status"] == "✅ Completed"
    assert step_names(out) == [
        "my first step-1",
        "some other step-1",
        "wait on something-1",
        "make a call to write that could maybe, just might, fail-1",
    ]
    assert "💤 Sleeping" in out
    flaky = out.split("make a call to write that could maybe, just might, fail-1")[-1]
    assert (
        len(
            re.findall(
                r"❌ Error\s+│ StorageUnavailableError: API call to "
                r"\$STORAGE_SYSTEM failed",
                flaky,
            )
        )
        == 2
    )
    assert flaky.count("✅ Success") == 1
    assert json.loads(got["Output"]) == {
        "files": 8,
        "write": {"written": 8, "allowed_ranges": 22, "attempt": 3},
    }
    assert "retrying in 1 second" in err and "retrying in 2 seconds" in err


@pytest.mark.slow
def test_sample_config_names_both_examples(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "stepline.cli",
            "--config",
            str(EXAMPLES / "stepline.toml"),
            "--database",
            f"sqlite:///{tmp_path}/sample.db",
            "workflows",
            "describe",
            "documents",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    got = fields(result.stdout)
    assert got["Class name"] == "documents:DocumentWorkflow"
    assert got["Configured in"].endswith("examples/stepline.toml (workflows[1])")
    assert got["Description"].startswith("Index a folder of .txt/.md documents")


# -- doclib -------------------------------------------------------------------------------------


def test_markdown_is_stripped_to_text() -> None:
    text = doclib.markdown_to_text(
        "# Title\n\nSome **bold** and `code` and a [link](http://x).\n\n- item one\n"
        "```\ncode block\n```\n"
    )
    assert "Title" in text and "Some bold and code and a link." in text
    assert "item one" in text
    assert "code block" not in text and "**" not in text and "](" not in text


def test_extract_text_takes_the_title() -> None:
    md = doclib.extract_text(EXAMPLES / "documents" / "durable-execution.md")
    assert md["title"] == "Durable execution" and md["format"] == "markdown"
    txt = doclib.extract_text(EXAMPLES / "documents" / "sqlite-wal.txt")
    assert txt["title"] == "SQLite write-ahead logging" and txt["format"] == "text"
    assert txt["chars"] == len(txt["text"])


def test_chunks_keep_every_sentence_in_order_within_the_limit() -> None:
    text = doclib.extract_text(EXAMPLES / "documents" / "retries-and-backoff.md")["text"]
    sentences = doclib.split_sentences(text)
    chunks = doclib.chunk_text(text, max_chars=200)
    assert len(chunks) > 1
    assert " ".join(chunks) == " ".join(sentences)
    for chunk in chunks:
        assert len(chunk) <= 200 or len(doclib.split_sentences(chunk)) == 1
    overlapping = doclib.chunk_text(text, max_chars=200, overlap=1)
    assert len(overlapping) >= len(chunks)
    with pytest.raises(ValueError):
        doclib.chunk_text(text, max_chars=0)


def test_embedding_is_deterministic_normalised_and_meaningful() -> None:
    a = doclib.embed("Retries with exponential backoff", 128)
    assert a == doclib.embed("Retries with exponential backoff", 128)
    assert len(a) == 128
    assert abs(sum(v * v for v in a) - 1.0) < 1e-4
    close = doclib.embed("retry the call with backoff that grows exponentially", 128)
    far = doclib.embed("sourdough bread crust", 128)
    assert doclib.cosine(a, close) > doclib.cosine(a, far)
    assert doclib.embed("the and of", 16) == [0.0] * 16  # stop words only


def test_index_is_idempotent_and_removable(tmp_path: Path) -> None:
    docs = [doclib.extract_text(EXAMPLES / "documents" / "sqlite-wal.txt")]
    chunks = doclib.chunk_documents(docs, 200)
    vectors = [doclib.embed(c["text"], 32) for c in chunks]
    first = doclib.index_chunks(tmp_path / "i.db", docs, chunks, vectors)
    second = doclib.index_chunks(tmp_path / "i.db", docs, chunks, vectors)
    assert first["chunks_in_index"] == second["chunks_in_index"] == len(chunks)
    assert doclib.remove_documents(tmp_path / "i.db", ["sqlite-wal.txt"]) == len(chunks)
    assert doclib.search(tmp_path / "i.db", "checkpoint") == []
    with pytest.raises(ValueError, match="chunks but"):
        doclib.index_chunks(tmp_path / "i.db", docs, chunks, vectors[:-1])


def test_summary_is_extractive() -> None:
    text = doclib.extract_text(EXAMPLES / "documents" / "durable-execution.md")["text"]
    summary = doclib.summarise(text, sentences=2)
    picked = doclib.split_sentences(summary)
    assert len(picked) == 2
    flat = " ".join(text.split())
    assert all(sentence in flat for sentence in picked)
    assert flat.index(picked[0]) < flat.index(picked[1])  # original order


def test_notification_is_written_atomically_and_idempotently(tmp_path: Path) -> None:
    target = tmp_path / "n" / "x.json"
    doclib.write_notification(target, {"to": "a"})
    doclib.write_notification(target, {"to": "a"})
    assert json.loads(target.read_text("utf-8")) == {"to": "a"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]
