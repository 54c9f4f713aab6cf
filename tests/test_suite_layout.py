"""The suite runs as CI runs it: `pytest` with the package installed and the checkout itself not on sys.path,
so a test module cannot import another through the `tests` package (session 18's suite passed here under
`python -m pytest` and failed in CI on such an import). Shared test helpers live in conftest fixtures or in
tests/agent/fixtures, loaded by path."""
import ast
from pathlib import Path

TESTS = Path(__file__).parent


def test_no_test_module_imports_the_tests_package():
    found = []
    for path in sorted([*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")]):  # fixtures may be broken on purpose
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(TESTS)}:{node.lineno} imports {n}" for n in names
                      if n == "tests" or n.startswith("tests.")]
    assert not found, found
