"""The wheel carries the bundled folders, and envgen.paths finds them in an installed copy."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_bundled_folders_and_finds_them(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                    str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("envgen-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("envgen/_bundled/envs/runtime/server.py", "envgen/_bundled/verifiers/envgen_verifiers/__init__.py",
                     "envgen/_bundled/agents/README.md", "envgen/_bundled/rl/templates/README.md",
                     "envgen/_bundled/data/README.md", "envgen/cli.py",
                     "envgen/_bundled/envs/general/travel_planning/generator.py",
                     "envgen/_bundled/envs/general/travel_planning/env/tools.py",
                     "envgen/_bundled/envs/general/travel_planning/hidden/verify.py",
                     "envgen/_bundled/envs/search/env/tools.py", "envgen/_bundled/envs/code/env/tools.py",
                     "envgen/_bundled/data/corpus/geo.jsonl.gz"):
        assert required in names, required
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", "from envgen.paths import bundled; print(bundled('envs')); "
                          "print(bundled('verifiers'))"], env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    for line in out.stdout.split():
        assert Path(line).is_relative_to(target / "envgen" / "_bundled"), line
