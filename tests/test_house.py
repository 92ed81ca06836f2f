"""The house keeps its shape (scripts/house.py reads it; docs/architecture.md draws it): imports only one way
(flows -> tasks -> infra) and in no circle, no source file over the size limit, folders by concern, each saying
what it is for."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import house  # noqa: E402


def test_the_house_has_no_circles_no_upward_imports_and_no_file_over_the_limit():
    found = house.read_house()
    assert found["cycles"] == []
    assert found["upward_imports"] == []
    assert found["files_over_limit"] == {}
    assert all(len(subs) >= 2 for subs in found["subpackages"].values()), found["subpackages"]


def test_every_package_says_what_it_is_for():
    for init in sorted(p for top in house.LAYERS for p in (ROOT / top).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 5, f"{init.relative_to(ROOT)} needs a docstring saying what the folder is for"


def test_the_reader_finds_a_circle_and_an_upward_import(tmp_path):
    """The check can fail: a planted circle and a task importing a flow are both reported."""
    for top in house.LAYERS:
        (tmp_path / top).mkdir()
        (tmp_path / top / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "infra" / "a.py").write_text("from infra.b import x\n")
    (tmp_path / "infra" / "b.py").write_text("def f():\n    from infra.a import y\n")
    (tmp_path / "tasks" / "t.py").write_text("from flows.research import research\n")
    (tmp_path / "flows" / "research.py").write_text("\n" * (house.MAX_LINES + 1))
    found = house.read_house(tmp_path)
    assert found["cycles"] == [["infra.a", "infra.b"]]
    assert found["upward_imports"] == ["tasks.t -> flows.research"]
    assert found["files_over_limit"] == {"flows.research": house.MAX_LINES + 1}
