"""docs/testing.md shows only code that runs: each of its Python examples is, verbatim, part of
a test module under examples/testing (collected by the suite: pyproject's testpaths)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_of_the_testing_docs_is_a_test_that_runs() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    sources = [
        p.read_text(encoding="utf-8") for p in (ROOT / "examples" / "testing").glob("test_*.py")
    ]
    assert len(blocks) >= 10
    for block in blocks:
        assert "def test_" in block, block
        assert any(block in source for source in sources), block
