"""The import structure of docs/architecture.md: no cycle between stepline's modules, counting
imports under ``TYPE_CHECKING`` too (the layers themselves are checked by ``lint-imports`` in
scripts/check, from pyproject.toml's contract)."""

from __future__ import annotations

import grimp


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = grimp.build_graph("stepline", include_external_packages=False)
    cycles = [
        f"{module} -> {imported} -> ... -> {module}"
        for module in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(module))
        if graph.chain_exists(importer=imported, imported=module)
    ]
    assert cycles == []


def test_the_cycle_check_sees_imports_under_type_checking(tmp_path, monkeypatch) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclic", include_external_packages=False, cache_dir=None)
    assert graph.chain_exists(importer="cyclic.b", imported="cyclic.a")
