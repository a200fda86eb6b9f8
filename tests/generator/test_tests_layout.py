"""The tests' own layout (CONTRIBUTING.md, "Tests in layers"): every test file in a layer
folder, none importing another test file (what tests share is in tests/support), and no two
test files of one name (the layer folders are not packages)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = {"generator", "engines", "runtime", "system", "model"}


def test_every_test_file_is_in_a_layer_and_imports_no_other() -> None:
    files = sorted(p for p in TESTS.rglob("test_*.py") if "golden" not in p.parts)
    assert files
    misplaced = [str(p.relative_to(TESTS)) for p in files if p.parent.name not in LAYERS]
    assert not misplaced, f"test files outside a layer folder (see CONTRIBUTING.md): {misplaced}"
    names = [p.name for p in files]
    assert len(names) == len(set(names)), "two test files share a name"
    found = []
    for p in [*files, *TESTS.joinpath("support").rglob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            found += [
                f"{p.relative_to(TESTS)}: {m}"
                for m in modules
                if m.split(".")[-1].startswith("test_")
            ]
    assert not found, f"imports of test files (move what they share to tests/support): {found}"
