"""``shapes``: a fixture repository with the Python set-up failures of real SWE-bench records (issue 28).

- sqlfluff-2386: a dev requirement whose releases are all yanked today (``types-pkg_resources``), which no
  test imports, and an unpinned requirement whose newest release is years newer than the commit
  (``tomli``: 1.2.2 on the commit's date, 2.x today);
- astroid-1268: tox ``[testenv] deps`` (``coverage<5``) and ``requirements_test.txt`` (``coverage~=5.5``),
  each installable, their union not;
- pydicom-1458: a top-level ``oldshapes.py`` shipped (``py_modules``) to raise ImportError on purpose;
- pydicom / sympy-13031: ``setup(**opts)`` with ``python_requires`` and the classifiers inside an ``opts``
  dict built with ``dict(...)`` from names assigned earlier, the classifiers naming only Python 3.6 (whose
  nearest suite, Debian buster, is archived).

Both commits are dated 2021-11-20, so the dependencies are resolved as of 2021-11-21.
Returns {"initial", "fix": sha}.
"""

from __future__ import annotations

from pathlib import Path

try:
    from .code_repo import _git, _write
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _git, _write

DATE = "2021-11-20T12:00:00+0000"

SETUP_PY = '''\
from setuptools import setup

CLASSIFIERS = [
    "Programming Language :: Python :: 3",
    "Programming Language :: Python :: 3.6",
]
NAME = "shapes"
with open("README.md") as f:
    LONG = f.read()

opts = dict(
    name=NAME,
    version="0.3.0",
    python_requires=">=3.6",
    classifiers=CLASSIFIERS,
    long_description=LONG,
    packages=["shapes"],
    py_modules=["oldshapes"],
    install_requires=["tomli"],
)

if __name__ == "__main__":
    setup(**opts)
'''

OLD_SHIM = '''\
raise ImportError("'import oldshapes' was removed in shapes 0.3: use 'import shapes'")
'''

CORE = '''\
def area(w, h):
    return w + h
'''

TESTS = '''\
import coverage
import tomli

from shapes.core import area


def test_coverage_from_requirements_test_txt():
    assert coverage.version_info[:2] == (5, 5)


def test_dependencies_as_of_the_commit_date():
    assert tomli.loads("a = 1") == {"a": 1}
    import importlib.metadata
    assert importlib.metadata.version("tomli") == "1.2.2"


def test_square():
    assert area(2, 2) == 4
'''

FIX_TESTS = TESTS + '''

def test_rectangle():
    assert area(2, 3) == 6
'''

TOX = '''\
[tox]
envlist = py36

[testenv]
deps =
    coverage<5
    pytest
commands = pytest
'''

FIX_MSG = "Compute the area of a rectangle as width times height instead of adding the two sides together"


def make_shapes_repo(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"setup.py": SETUP_PY, "README.md": "# shapes\n", "oldshapes.py": OLD_SHIM,
                  "shapes/__init__.py": '"""shapes."""\n', "shapes/core.py": CORE,
                  "requirements_test.txt": "coverage~=5.5\ntypes-pkg_resources\n", "tox.ini": TOX,
                  "pytest.ini": "[pytest]\ntestpaths = tests\n", ".gitignore": "*.egg-info/\n__pycache__/\nbuild/\n",
                  "tests/test_core.py": TESTS})
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "shapes: areas of squares", date=DATE)
    shas = {"initial": _git(root, "rev-parse", "HEAD")}
    _write(root, {"shapes/core.py": CORE.replace("w + h", "w * h"), "tests/test_core.py": FIX_TESTS})
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", FIX_MSG, date=DATE)
    shas["fix"] = _git(root, "rev-parse", "HEAD")
    return shas
