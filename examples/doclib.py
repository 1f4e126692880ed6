"""Document processing for the documents example: plain functions, no workflow code.

Everything is local and deterministic, with no model download and no network:

- :func:`extract_text` reads ``.txt`` and ``.md`` files (Markdown syntax is stripped);
- :func:`chunk_text` packs whole sentences into chunks of bounded size;
- :func:`embed` is a feature-hashing embedding (signed hashing of words and word pairs,
  L2-normalised), so similar texts get similar vectors without any trained model;
- :func:`index_chunks` / :func:`search` keep the vectors in a SQLite file;
- :func:`summarise` is an extractive summary (the most representative sentences);
- :func:`write_notification` writes the "email" as a JSON file, atomically.

The workflow in ``documents.py`` calls these from its steps; a DAG form can reuse them as is.
Every function that writes is idempotent, because a durable step may run more than once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import sqlite3
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

SUPPORTED_SUFFIXES = (".md", ".txt")
EMBEDDING_MODEL = "feature-hashing-v1"

_STOPWORD_TEXT = """
a about after again all also an and any are as at be because been before being between both but
by can could did do does doing done each for from further had has have having he her here hers
him his how i if in into is it its itself just me more most my no nor not now of off on once only
or other our ours out over own same she should so some such than that the their them then there
these they this those through to too under until up very was we were what when where which while
who whom why will with would you your yours
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


# -- extraction ---------------------------------------------------------------------------------


def list_documents(folder: Path) -> list[str]:
    """Names of the supported documents directly in ``folder``, sorted."""
    if not folder.is_dir():
        raise FileNotFoundError(f"document folder {folder} does not exist")
    return sorted(
        p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
    )


def read_folder(folder: Path) -> list[dict[str, Any]]:
    """Every supported document of ``folder`` as :func:`extract_text` reads it.

    Raises ``FileNotFoundError`` if the folder does not exist and ``ValueError`` if it holds no
    supported document: input errors that no retry can fix.
    """
    names = list_documents(folder)
    if not names:
        raise ValueError(f"no .txt or .md documents in {folder}")
    return [extract_text(folder / name) for name in names]


def markdown_to_text(markdown: str) -> str:
    """Markdown to plain text: headings, emphasis, links, list markers and code fences go."""
    lines: list[str] = []
    in_fence = False
    for raw in markdown.splitlines():
        line = raw.rstrip()
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            lines.extend(["", heading.group(1), ""])  # a heading is a paragraph of its own
            continue
        line = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list markers
        line = re.sub(r"^\s*>\s?", "", line)  # block quotes
        line = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", line)  # links and images
        line = re.sub(r"(\*\*|__|\*|_|`)(.+?)\1", r"\2", line)  # emphasis and inline code
        lines.append(line)
    return "\n".join(lines)


def extract_text(path: Path) -> dict[str, Any]:
    """Read one document: ``{document, title, format, chars, text}``."""
    raw = path.read_text(encoding="utf-8")
    is_markdown = path.suffix.lower() == ".md"
    text = markdown_to_text(raw) if is_markdown else raw
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    paragraphs = [p for p in paragraphs if p]
    title = path.stem.replace("-", " ").replace("_", " ").capitalize()
    if paragraphs and len(paragraphs[0]) <= 80 and not paragraphs[0].endswith("."):
        title = paragraphs[0]
    clean = "\n\n".join(paragraphs)
    return {
        "document": path.name,
        "title": title,
        "format": "markdown" if is_markdown else "text",
        "chars": len(clean),
        "text": clean,
    }


# -- sentences and chunks -----------------------------------------------------------------------


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``; a paragraph without end punctuation (a title) is one sentence."""
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        joined = " ".join(paragraph.split())
        if joined:
            sentences.extend(s for s in _SENTENCE_END.split(joined) if s)
    return sentences


def chunk_text(text: str, max_chars: int = 400, overlap: int = 0) -> list[str]:
    """Pack whole sentences into chunks of at most ``max_chars`` characters.

    A sentence longer than ``max_chars`` becomes a chunk of its own. ``overlap`` repeats the
    last sentences of a chunk at the start of the next one.
    """
    if max_chars < 1 or overlap < 0:
        raise ValueError("max_chars must be positive and overlap not negative")
    chunks: list[list[str]] = []
    current: list[str] = []
    for sentence in split_sentences(text):
        if current and len(" ".join([*current, sentence])) > max_chars:
            chunks.append(current)
            current = current[-overlap:] if overlap else []
            if current and len(" ".join([*current, sentence])) > max_chars:
                current = []
        current.append(sentence)
    if current:
        chunks.append(current)
    return [" ".join(chunk) for chunk in chunks]


def chunk_documents(documents: Iterable[dict[str, Any]], max_chars: int) -> list[dict[str, Any]]:
    """Chunks of every document: ``{id, document, position, text}``."""
    return [
        {
            "id": f"{doc['document']}#{position}",
            "document": doc["document"],
            "position": position,
            "text": text,
        }
        for doc in documents
        for position, text in enumerate(chunk_text(doc["text"], max_chars))
    ]


# -- embedding ----------------------------------------------------------------------------------


def _stem(word: str) -> str:
    """A tiny suffix stripper, enough for 'retries'/'retry' and 'failed'/'fail' to meet."""
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


def tokens(text: str) -> list[str]:
    """Lower-case, stemmed words without stop words."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1]


def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
    return digest % dimensions, (1.0 if digest >> 63 else -1.0)


def embed(text: str, dimensions: int = 256) -> list[float]:
    """A deterministic feature-hashing embedding of ``text`` (unit length, or all zeros).

    Each word and each pair of neighbouring words adds ``1 + log(count)`` (pairs count half)
    to a signed bucket chosen by a stable hash, so the same text always gives the same vector,
    in any process, on any machine.
    """
    words = tokens(text)
    features = Counter(words)
    pairs = Counter(f"{a} {b}" for a, b in itertools.pairwise(words))
    vector = [0.0] * dimensions
    for counter, weight in ((features, 1.0), (pairs, 0.5)):
        for feature, count in counter.items():
            index, sign = _bucket(feature, dimensions)
            vector[index] += sign * weight * (1.0 + math.log(count))
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:
        return vector
    return [round(v / norm, 6) for v in vector]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0 when either vector is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


# -- the index ----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    document TEXT PRIMARY KEY, title TEXT NOT NULL, chunks INTEGER NOT NULL,
    indexed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id TEXT PRIMARY KEY, document TEXT NOT NULL, position INTEGER NOT NULL, text TEXT NOT NULL,
    model TEXT NOT NULL, vector BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_document ON chunks (document);
"""


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA)
    return conn


def index_chunks(
    path: Path,
    documents: Sequence[dict[str, Any]],
    chunks: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]],
    model: str = EMBEDDING_MODEL,
) -> dict[str, Any]:
    """Replace the index entries of ``documents`` with ``chunks`` and their ``vectors``, in one
    transaction (so running it twice leaves the same index)."""
    if len(chunks) != len(vectors):
        raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
    with closing(_connect(path)) as conn, conn:
        names = [doc["document"] for doc in documents]
        conn.executemany("DELETE FROM chunks WHERE document = ?", [(n,) for n in names])
        conn.executemany(
            "INSERT INTO chunks (id, document, position, text, model, vector)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                (c["id"], c["document"], c["position"], c["text"], model, array("f", v).tobytes())
                for c, v in zip(chunks, vectors, strict=True)
            ],
        )
        per_document = Counter(c["document"] for c in chunks)
        now = time.time()
        conn.executemany(
            "INSERT INTO documents (document, title, chunks, indexed_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (document) DO UPDATE SET title = excluded.title,"
            " chunks = excluded.chunks, indexed_at = excluded.indexed_at",
            [
                (doc["document"], doc["title"], per_document[doc["document"]], now)
                for doc in documents
            ],
        )
        total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return {
        "index": str(path),
        "documents": len(names),
        "chunks": len(chunks),
        "chunks_in_index": total,
    }


def remove_documents(path: Path, documents: Iterable[str]) -> int:
    """Remove documents and their chunks from the index; return how many chunks went."""
    if not path.exists():
        return 0
    with closing(_connect(path)) as conn, conn:
        removed = 0
        for name in documents:
            removed += conn.execute("DELETE FROM chunks WHERE document = ?", (name,)).rowcount
            conn.execute("DELETE FROM documents WHERE document = ?", (name,))
    return removed


def search(path: Path, query: str, limit: int = 3) -> list[dict[str, Any]]:
    """The chunks most similar to ``query``: ``{id, document, text, score}``, best first."""
    with closing(_connect(path)) as conn:
        rows = conn.execute("SELECT id, document, text, vector FROM chunks").fetchall()
    if not rows:
        return []
    dimensions = len(array("f", rows[0][3]))
    wanted = embed(query, dimensions)
    scored = []
    for chunk_id, document, text, blob in rows:
        vector = array("f")
        vector.frombytes(blob)
        scored.append(
            {
                "id": chunk_id,
                "document": document,
                "text": text,
                "score": round(cosine(wanted, vector), 4),
            }
        )
    scored.sort(key=lambda hit: (-hit["score"], hit["id"]))
    return scored[:limit]


# -- summaries and notifications ----------------------------------------------------------------


def summarise(text: str, sentences: int = 2) -> str:
    """An extractive summary: the ``sentences`` sentences whose words are most frequent in the
    whole text, in their original order. Titles and very short sentences are skipped."""
    candidates = [s for s in split_sentences(text) if len(s.split()) >= 6]
    if not candidates:
        return " ".join(split_sentences(text)[:1])
    frequency = Counter(tokens(text))
    top = max(frequency.values(), default=1)

    def score(sentence: str) -> float:
        words = tokens(sentence)
        return sum(frequency[w] / top for w in words) / math.sqrt(len(words) + 1)

    ranked = sorted(range(len(candidates)), key=lambda i: (-score(candidates[i]), i))
    return " ".join(candidates[i] for i in sorted(ranked[:sentences]))


def write_notification(path: Path, message: dict[str, Any]) -> str:
    """Write ``message`` as JSON to ``path`` atomically (write a temporary file, rename it), so
    a retried step never leaves half a file and writing twice gives the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(message, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return str(path)
