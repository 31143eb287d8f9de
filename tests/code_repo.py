"""A small real git repository for the code family's tests and benchmark.

``calc`` (src layout, pytest) goes through five commits after the initial one, each a candidate:

- fix-subtract: fixes a swapped-operand bug and adds ``test_subtract`` (FAIL_TO_PASS); the issue is #7,
  named only in the commit message ("fixes #7");
- float-multiply: makes ``multiply`` return floats and breaks ``test_multiply_int`` (PASS_TO_FAIL);
- docs: a code change without tests (filtered: no test change);
- power: adds ``power`` and a new test file (its tests are missing from the base report: failing);
- readme: documentation only (filtered).

``tests/test_core.py`` also holds ``test_flaky``, which fails every third time it runs on a machine,
so every side of a 3-run validation sees it both pass and fail. Dates and identities are fixed, so
commit ids are the same on every machine.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

PYPROJECT = '''\
[project]
name = "calc"
version = "0.1.0"
description = "A tiny calculator"
requires-python = ">=3.9"
classifiers = [
  "Programming Language :: Python :: 3",
  "Programming Language :: Python :: 3.11",
]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

CORE = '''\
"""Arithmetic for calc."""


def add(a, b):
    return a + b


def subtract(a, b):
    return b - a


def multiply(a, b):
    return a * b


def divide(a, b):
    return a / b
'''

TESTS = '''\
import os
import tempfile

from calc.core import add, divide, multiply


def test_add():
    assert add(2, 3) == 5


def test_multiply_int():
    assert multiply(2, 3) == 6
    assert isinstance(multiply(2, 3), int)


def test_divide():
    assert divide(6, 3) == 2


def test_flaky():
    path = os.path.join(tempfile.gettempdir(), "calc-flaky-counter")
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(n))
    assert n % 3 != 0, "fails every third run"
'''

SLOW_TESTS = '''\
import pytest

from calc.core import add


@pytest.mark.parametrize("n", range({n}))
def test_work(n):
    total = 0
    for i in range({loops}):
        total = add(total, i % 7)
    assert total >= 0
'''

FIX_SUBTRACT_MSG = """Fix subtract returning the wrong sign (fixes #7)

subtract(5, 3) returned -2 instead of 2: the operands were swapped, so every
difference computed with calc came out negated."""

FLOAT_MULTIPLY_MSG = """Return floats from multiply for consistency with divide

Mixed int/float results surprised users chaining multiply and divide; multiply
now always returns a float like divide does."""

DOCS_MSG = """Document that divide raises ZeroDivisionError for a zero divisor

The behaviour was undocumented and users asked whether it returns inf."""

POWER_MSG = """Add power() for integer exponents

calc had no way to raise a number to a power; power(2, 10) now gives 1024."""

README_MSG = "Describe the project in the README and explain how to run its tests with pytest."


def _git(repo: Path, *args: str, date: str = "2024-01-01T00:00:00+0000") -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
                "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
                "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)})
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _commit(repo: Path, message: str, day: int) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, date=f"2024-01-{day:02d}T12:00:00+0000")
    return _git(repo, "rev-parse", "HEAD")


def make_calc_repo(root: Path, *, slow_tests: int = 0, slow_loops: int = 20000, flaky: bool = True) -> dict[str, str]:
    """Create the repository at ``root``; return {"initial", "fix", "float", "docs", "power", "readme": sha}.

    ``slow_tests`` adds a parametrized test module of that many CPU-bound tests to the test files the
    fix commits touch (the benchmark uses it to make test time dominate). ``flaky=False`` leaves ``test_flaky``
    out: its counter lives in the temp dir, which the local sandbox shares between runs and candidates, so
    local-sandbox builds that must decide the same every time use a repository without it.
    """
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    tests = TESTS if flaky else TESTS[:TESTS.index("\n\ndef test_flaky")] + "\n"
    extra = {}
    if slow_tests:
        extra["tests/test_work.py"] = SLOW_TESTS.format(n=slow_tests, loops=slow_loops)
    _write(root, {"pyproject.toml": PYPROJECT, "src/calc/__init__.py": '"""calc."""\n', "src/calc/core.py": CORE,
                  "tests/test_core.py": tests, "README.md": "# calc\n", **extra})
    shas = {"initial": _commit(root, "Initial calc package with add, subtract, multiply and divide", 1)}

    core = CORE.replace("return b - a", "return a - b")
    tests = tests + "\n\ndef test_subtract():\n    from calc.core import subtract\n    assert subtract(5, 3) == 2\n"
    _write(root, {"src/calc/core.py": core, "tests/test_core.py": tests,
                  **({"tests/test_work.py": extra["tests/test_work.py"] + "\n# touched by the fix\n"} if extra else {})})
    shas["fix"] = _commit(root, FIX_SUBTRACT_MSG, 2)

    core = core.replace("    return a * b", "    return float(a * b)")
    tests = tests + "\n\ndef test_multiply_float():\n    assert isinstance(multiply(2, 3), float)\n"
    _write(root, {"src/calc/core.py": core, "tests/test_core.py": tests})
    shas["float"] = _commit(root, FLOAT_MULTIPLY_MSG, 3)

    core = core.replace("def divide(a, b):\n", "def divide(a, b):\n    \"\"\"a / b; raises ZeroDivisionError when b is 0.\"\"\"\n")
    _write(root, {"src/calc/core.py": core})
    shas["docs"] = _commit(root, DOCS_MSG, 4)

    core = core + "\n\ndef power(a, n):\n    result = 1\n    for _ in range(n):\n        result *= a\n    return result\n"
    _write(root, {"src/calc/core.py": core, "tests/test_power.py": textwrap.dedent('''\
        from calc.core import power


        def test_power():
            assert power(2, 10) == 1024


        def test_power_zero():
            assert power(5, 0) == 1
        ''')})
    shas["power"] = _commit(root, POWER_MSG, 5)

    _write(root, {"README.md": "# calc\n\nA tiny calculator. Run the tests with `python -m pytest`.\n"})
    shas["readme"] = _commit(root, README_MSG, 6)
    return shas


def diff(root: Path, base: str, head: str) -> str:
    return _git(root, "diff", "--binary", "--full-index", base, head) + "\n"


# ---------------------------------------------------------------- tally: a setup.cfg project with its own pytest plugin

TALLY_SETUP_CFG = '''\
[metadata]
name = tally
version = 1.2.0
description = Small statistics over lists of numbers
classifiers =
    Programming Language :: Python :: 3
    Programming Language :: Python :: 3.11

[options]
package_dir =
    =src
packages = find:
python_requires = >=3.9

[options.packages.find]
where = src

[options.entry_points]
pytest11 =
    tally = tally.pytest_plugin

[tool:pytest]
testpaths = tests
addopts = --strict-markers
markers =
    slow: long-running tests
xfail_strict = true
'''

TALLY_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
'''

TALLY_CORE = '''\
"""Statistics over lists of numbers."""


def total(values):
    return sum(values)


def mean(values):
    return total(values) / len(values)


def spread(values):
    """The distance between the largest and the smallest value."""
    return min(values) - max(values)
'''

TALLY_PLUGIN = '''\
"""tally's pytest plugin (entry point ``tally``): sample data for tests of code that uses tally."""

import pytest


@pytest.fixture
def samples():
    return [3, 1, 4, 1, 5, 9, 2, 6]
'''

TALLY_CONFTEST = '''\
import pytest


@pytest.fixture
def empty():
    return []
'''

TALLY_TESTS = '''\
import pytest

from tally.core import mean, total


def test_total(samples):
    assert total(samples) == 31


def test_mean(samples):
    assert mean(samples) == 31 / 8


def test_mean_of_nothing(empty):
    with pytest.raises(ZeroDivisionError):
        mean(empty)
'''

TALLY_FIX_MSG = """Fix spread returning a negative distance

spread() subtracted the largest value from the smallest, so every spread came out
negative; it now returns max - min."""


def make_tally_repo(root: Path) -> dict[str, str]:
    """``tally``: configured in setup.cfg ([tool:pytest], entry points; pyproject.toml holds only the
    build system), src layout, a tests/conftest.py, and its own pytest plugin (entry point ``tally``)
    whose ``samples`` fixture the tests need, so the environment's plugin must be loaded to pass.
    One candidate: ``fix`` corrects ``spread`` and adds ``test_spread`` (FAIL_TO_PASS).
    Returns {"initial", "fix": sha}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"setup.cfg": TALLY_SETUP_CFG, "pyproject.toml": TALLY_PYPROJECT, "README.md": "# tally\n",
                  "src/tally/__init__.py": '"""tally."""\n', "src/tally/core.py": TALLY_CORE,
                  "src/tally/pytest_plugin.py": TALLY_PLUGIN, "tests/conftest.py": TALLY_CONFTEST,
                  "tests/test_core.py": TALLY_TESTS})
    shas = {"initial": _commit(root, "tally: total, mean and spread, with a pytest plugin for sample data", 1)}
    _write(root, {"src/tally/core.py": TALLY_CORE.replace("min(values) - max(values)", "max(values) - min(values)"),
                  "tests/test_core.py": TALLY_TESTS.replace("from tally.core import mean, total",
                                                            "from tally.core import mean, spread, total")
                  + "\n\ndef test_spread(samples):\n    assert spread(samples) == 8\n"})
    shas["fix"] = _commit(root, TALLY_FIX_MSG, 2)
    return shas


# ---------------------------------------------------------------- meter: what honest validation must report

METER_CORE = '''\
"""Measurements for meter."""


def add(a, b):
    return a + b


def subtract(a, b):
    return b - a


def halve(x):
    return x // 2
'''

METER_TESTS = '''\
import socket

from meter.core import add, halve


def test_add():
    assert add(2, 3) == 5


def test_add_floats():
    assert add(0.5, 0.25) == 0.75


def test_lookup_remote_units():
    # needs the network: validation runs have none
    socket.getaddrinfo("units.example.invalid", 443)


def test_halve():
    # fails at every commit until "Make halve exact": its test patch does not touch it
    assert halve(3) == 1.5
'''

METER_EXTRA_CONFTEST = '''\
import pytest

from meter.core import power


@pytest.fixture
def square():
    return lambda x: power(x, 2)
'''

METER_EXTRA_TESTS = '''\
from meter.core import power


def test_power():
    assert power(2, 10) == 1024


def test_square(square):
    assert square(7) == 49
'''

METER_FMT_TESTS = '''\
import nosuchdep

from meter.core import fmt


def test_fmt():
    assert fmt(1.5) == nosuchdep.format(1.5)
'''

METER_FIX_MSG = """Fix subtract's sign and add power() with its own test folder

subtract(5, 3) returned -2; power(2, 10) is new. The new tests/extra folder has a
conftest that imports power, so at the base commit it does not import."""

METER_FMT_MSG = """Add fmt() to format a measurement, tested against nosuchdep

fmt(1.5) gives the same text as nosuchdep.format, a package this environment lacks."""

METER_HALVE_MSG = """Make halve exact for odd numbers and check add with negatives

halve(3) returned 1 (floor division); it now returns 1.5."""


def make_meter_repo(root: Path) -> dict[str, str]:
    """``meter`` (src layout, pytest): three candidates, each a real-world validation trap.

    - ``fix``: fixes ``subtract`` (``test_subtract`` added to tests/test_core.py) and adds ``power``
      with a new folder tests/extra whose conftest imports ``power``: at base that conftest does not
      import and a joint pytest session stops before any test runs. Right lists: FAIL_TO_PASS =
      test_subtract and tests/extra's tests, PASS_TO_PASS = test_add, test_add_floats; at every
      commit test_lookup_remote_units needs the network and test_halve fails on both sides;
    - ``fmt``: a test file that imports a module the environment lacks: its tests never run;
    - ``halve``: fixes ``halve`` but its test patch changes only ``test_add``: the FAIL_TO_PASS test
      (test_halve) is one the test patch does not add or change.
    Returns {"initial", "fix", "fmt", "halve": sha}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"pyproject.toml": PYPROJECT.replace('name = "calc"', 'name = "meter"')
                  .replace("A tiny calculator", "Measurements"), "README.md": "# meter\n",
                  "src/meter/__init__.py": '"""meter."""\n', "src/meter/core.py": METER_CORE,
                  "tests/test_core.py": METER_TESTS})
    shas = {"initial": _commit(root, "meter: add, subtract and halve, with tests for each of them", 1)}
    core = METER_CORE.replace("return b - a", "return a - b") + (
        "\n\ndef power(a, n):\n    result = 1\n    for _ in range(n):\n        result *= a\n    return result\n")
    tests = METER_TESTS + "\n\ndef test_subtract():\n    from meter.core import subtract\n    assert subtract(5, 3) == 2\n"
    _write(root, {"src/meter/core.py": core, "tests/test_core.py": tests,
                  "tests/extra/conftest.py": METER_EXTRA_CONFTEST, "tests/extra/test_power.py": METER_EXTRA_TESTS})
    shas["fix"] = _commit(root, METER_FIX_MSG, 2)
    core += "\n\ndef fmt(x):\n    return f\"{x:g}\"\n"
    _write(root, {"src/meter/core.py": core, "tests/test_fmt.py": METER_FMT_TESTS})
    shas["fmt"] = _commit(root, METER_FMT_MSG, 3)
    _write(root, {"src/meter/core.py": core.replace("return x // 2", "return x / 2"),
                  "tests/test_core.py": tests.replace("    assert add(2, 3) == 5\n",
                                                      "    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n")})
    shas["halve"] = _commit(root, METER_HALVE_MSG, 4)
    return shas

# ---------------------------------------------------------------- scmdemo: a project only its build backend installs

SCM_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64", "setuptools_scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "scmdemo"
dynamic = ["version", "dependencies"]
description = "Unit conversions"
requires-python = ">=3.9"
classifiers = ["Programming Language :: Python :: 3", "Programming Language :: Python :: 3.11"]

[project.optional-dependencies]
test = ['exceptiongroup>=1.0.0rc8; python_version<"3.11"']

[project.entry-points.pytest11]
scmdemo = "scmdemo.plugin"

[dependency-groups]
base = ['iniconfig==2.0.0; python_version >= "3.9"']
test = [{include-group = "base"}]

[tool.setuptools_scm]
version_file = "src/scmdemo/_version.py"

[tool.pytest.ini_options]
python_files = ["test_*.py", "check_*.py"]
python_functions = ["test_*", "check_*"]
testpaths = ["tests"]
'''

SCM_SETUP_PY = '''\
"""Dependencies computed in code: read from requirements.in, as many projects do."""
from pathlib import Path

from setuptools import setup


def requirements():
    text = (Path(__file__).parent / "requirements.in").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


setup(install_requires=requirements())
'''

SCM_CORE = '''\
"""Unit conversions."""


def km_to_m(km):
    return km * 1000


def m_to_km(m):
    return m * 1000
'''

SCM_PLUGIN = '''\
"""scmdemo's pytest plugin (entry point ``scmdemo``): distances the tests convert."""
import pytest


@pytest.fixture
def distances():
    return [0, 1, 2.5]
'''

SCM_TESTS = '''\
import importlib.util
import sys
from importlib.metadata import version

from packaging.version import Version

import scmdemo
from scmdemo.core import km_to_m


def test_km_to_m(distances):
    assert [km_to_m(d) for d in distances] == [0, 1000, 2500]


def test_version_from_the_scm_version_file():
    assert scmdemo.__version__ == "1.4.0" and scmdemo.version_tuple[:2] == (1, 4)


def test_dependency_computed_in_setup_py_is_installed():
    assert Version(version("packaging")) >= Version("24")


def test_marker_conditional_requirements():
    assert version("iniconfig") == "2.0.0"  # python_version >= "3.9": installed
    spec = importlib.util.find_spec("exceptiongroup")  # python_version < "3.11": not installed here
    assert spec is None or not spec.origin.startswith(sys.prefix)
'''

SCM_CHECKS = '''\
from scmdemo.core import m_to_km


def check_m_to_km(distances):
    assert [m_to_km(d * 1000) for d in distances] == [0, 1, 2.5]


def check_m_to_km_small():
    assert m_to_km(500) == 0.5
'''

SCM_FIX_MSG = """Fix m_to_km multiplying instead of dividing

m_to_km(500) returned 500000 instead of 0.5: the conversion multiplied by 1000."""

SCM_BREAK_MSG = "Load optional accelerators at import time"

SCM_LATER_MSG = """Add cm_to_m for centimetre readings

Readings from the new sensor come in centimetres; cm_to_m(250) gives 2.5."""


def make_scm_repo(root: Path) -> dict[str, str]:
    """``scmdemo``: installable only by its build backend. setuptools_scm writes the git-ignored
    ``src/scmdemo/_version.py`` the package imports (tag ``v1.4.0`` on the initial commit), ``setup.py``
    computes ``install_requires`` from requirements.in (``packaging>=24``), the project's own pytest plugin
    (entry point ``scmdemo``, fixture ``distances``) is declared next to a dynamic version, a test extra
    carries a requirement for Python < 3.11 only and a PEP 735 group one for Python >= 3.9 (``iniconfig==2.0.0``),
    and ``python_files`` makes ``check_*.py`` test files.

    Candidates: ``fix`` (fixes ``m_to_km``, adds tests/check_core.py: FAIL_TO_PASS 2 checks, PASS_TO_PASS the
    4 tests of tests/test_core.py it touches); ``break`` changes code only (filtered); ``later`` adds
    ``cm_to_m`` on top of ``break``, whose package no longer imports: rejected at the install check.
    Returns {"initial", "fix", "break", "later": sha}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"pyproject.toml": SCM_PYPROJECT, "setup.py": SCM_SETUP_PY, "requirements.in": "packaging>=24\n",
                  ".gitignore": "src/scmdemo/_version.py\nbuild/\n*.egg-info/\n__pycache__/\n",
                  "README.md": "# scmdemo\n",
                  "src/scmdemo/__init__.py": '"""scmdemo."""\nfrom ._version import version as __version__, '
                                             'version_tuple\n',
                  "src/scmdemo/core.py": SCM_CORE, "src/scmdemo/plugin.py": SCM_PLUGIN,
                  "tests/test_core.py": SCM_TESTS})
    shas = {"initial": _commit(root, "scmdemo: kilometre and metre conversions", 1)}
    _git(root, "tag", "v1.4.0")
    _write(root, {"src/scmdemo/core.py": SCM_CORE.replace("return m * 1000", "return m / 1000"),
                  "tests/check_core.py": SCM_CHECKS,
                  "tests/test_core.py": SCM_TESTS.replace("from scmdemo.core import km_to_m",
                                                          "from scmdemo.core import km_to_m  # noqa: F401")})
    shas["fix"] = _commit(root, SCM_FIX_MSG, 2)
    _write(root, {"src/scmdemo/__init__.py": '"""scmdemo."""\nfrom ._version import version as __version__, '
                                             'version_tuple\nfrom . import _accel  # noqa: F401\n'})
    shas["break"] = _commit(root, SCM_BREAK_MSG, 3)
    _write(root, {"src/scmdemo/core.py": SCM_CORE.replace("return m * 1000", "return m / 1000")
                  + "\n\ndef cm_to_m(cm):\n    return cm / 100\n",
                  "tests/check_core.py": SCM_CHECKS + "\n\ndef check_cm_to_m():\n    from scmdemo.core import cm_to_m\n"
                                                      "    assert cm_to_m(250) == 2.5\n"})
    shas["later"] = _commit(root, SCM_LATER_MSG, 4)
    return shas
