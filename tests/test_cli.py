"""The `envgen` command line as a user runs it: a real subprocess, JSON output, one-line errors."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

from concurrent.futures import ThreadPoolExecutor

import pytest
import typer.main

from envgen.cli import app

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo


def envgen(*args: str, cwd=None, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", **(env or {})}
    p = subprocess.run([sys.executable, "-m", "envgen", *args], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-2000:]
    return p


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "travel"
    summary = json.loads(envgen("build", "general", "--category", "travel-planning", "--out", str(out),
                                "--tasks", "20", "--json").stdout)
    assert summary["kept"] == summary["proposed"] == 20
    return out, summary


def command_paths(group=None, prefix=()) -> list[tuple[str, ...]]:
    """Every runnable command of the CLI, e.g. ("build", "general"), ("image", "base"); lazy groups included."""
    group = group or typer.main.get_command(app)
    paths = []
    for name in sorted(group.list_commands(None)):
        cmd = group.get_command(None, name)
        paths += command_paths(cmd, (*prefix, name)) if hasattr(cmd, "list_commands") else [(*prefix, name)]
    return paths


def test_version_comes_from_package_metadata():
    assert envgen("--version").stdout.strip() == f"envgen {importlib.metadata.version('envgen')}"


def test_every_command_takes_json():
    paths = command_paths()
    assert {("export", "swebench"), ("image", "base"), ("image", "build"), ("sandbox", "gc"), ("ls",),
            ("build", "general"), ("build", "search"), ("build", "code")} <= set(paths)
    with ThreadPoolExecutor(8) as pool:
        helps = dict(zip(paths, pool.map(lambda c: envgen(*c, "--help").stdout, paths)))
    assert [" ".join(c) for c, text in helps.items() if "--json" not in text] == []


def test_build_validate_run_ls(travel, tmp_path):
    out, summary = travel
    assert set(summary["difficulty"]) >= {"1", "2", "3", "4", "5", "6", "7", "8"}
    v = json.loads(envgen("validate", str(out), "--json").stdout)
    assert v["passed"] == v["tasks"] == 20 and v["failed"] == []
    t = json.loads(envgen("run", str(out), "--task", "travel-s0-0005", "--policy", "oracle", "--json").stdout)
    assert t["reward"] == 1.0 and t["terminated"] and t["tool_calls"] == t["turns"] - 1
    t = json.loads(envgen("run", str(out), "--task", "travel-s0-0005", "--policy", "null", "--json").stdout)
    assert t["reward"] == 0.0
    rows = json.loads(envgen("ls", str(out.parent), "--json").stdout)
    assert [r["name"] for r in rows] == ["general-travel-planning"] and rows[0]["tasks"] == 20
    text = envgen("run", str(out), "--task", "travel-s0-0005").stdout
    assert "reward 1" in text and "[user]" in text


def test_check_writes_stats_kept_pack_and_histogram(travel, tmp_path):
    out, _ = travel
    r = json.loads(envgen("check", str(out), "--policy", "oracle", "--k", "5", "--out", str(tmp_path / "kept"),
                          "--plot", str(tmp_path / "h.png"), "--store", str(tmp_path / "s.sqlite"), "--json").stdout)
    assert r["kept"] == 20 and r["rollouts"] == 20 and r["naive_rollouts"] == 100
    assert (tmp_path / "h.png").stat().st_size > 1000
    assert json.loads(envgen("validate", str(tmp_path / "kept"), "--json").stdout)["passed"] == 20


def test_families_lists_families_categories_and_options():
    fams = {f["family"]: f for f in json.loads(envgen("families", "--json").stdout)}
    assert set(fams) >= {"general", "search", "code"}
    cats = {(name, c["category"]) for name, f in fams.items() for c in f["categories"]}
    assert {("general", "travel-planning"), ("general", "library-catalog"), ("search", "geo-multihop")} <= cats
    code = {o["name"]: o for o in fams["code"]["options"]}
    assert code["source"]["flags"] == ["--from"] and code["runs"]["default"] == 3 and code["out"]["required"]
    assert all(o["description"] for f in fams.values() for o in f["options"])  # every option is documented


def test_another_distribution_adds_a_family(tmp_path):
    """A Family exposed through the ``envgen.families`` entry-point group becomes `envgen build NAME`, its options
    model's fields become flags, and bad values are one-line input errors: no CLI edit."""
    site = tmp_path / "site"
    (site / "echo_family").mkdir(parents=True)
    (site / "echo_family" / "__init__.py").write_text(
        '"""Echo: writes an empty folder (a test family)."""\n'
        "from pydantic import Field\n"
        "from envgen.build.family import BuildOptions, Family\n"
        "from envgen.build.report import BuildReport\n"
        "class Options(BuildOptions):\n"
        "    words: int = Field(2, ge=1, description='How many words.')\n"
        "class Echo(Family):\n"
        "    name = 'echo'\n"
        "    Options = Options\n"
        "    def build(self, options, *, progress=None, log=None):\n"
        "        options.out.mkdir(parents=True)\n"
        "        return BuildReport(family=self.name, out=options.out, proposed=options.words, kept=options.words)\n"
        "FAMILY = Echo()\n")
    dist = site / "echo_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[envgen.families]\necho = echo_family:FAMILY\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    assert "echo" in envgen("build", "--help", env=env).stdout
    assert "How many words." in envgen("build", "echo", "--help", env=env).stdout
    r = json.loads(envgen("build", "echo", "--words", "5", "--out", str(tmp_path / "o"), "--json", env=env).stdout)
    assert r["family"] == "echo" and r["kept"] == 5 and (tmp_path / "o").is_dir()
    p = envgen("build", "echo", "--words", "0", "--out", str(tmp_path / "p"), check=False, env=env)
    assert p.returncode == 2 and p.stderr.strip() == (
        "error: envgen build echo: --words: Input should be greater than or equal to 1")
    assert "echo" not in envgen("build", "--help").stdout  # without the distribution, no such family


@pytest.mark.parametrize("args,needle", [
    (("validate", "/nonexistent/pack"), "not a pack (no pack.json)"),
    (("build", "general", "--category", "nope", "--out", "/tmp/x"), "nope"),
    (("run", "/nonexistent", "--policy", "oracle"), "not a pack"),
    (("check", "/nonexistent", "--policy", "oracle"), "not a pack"),
    (("build", "code", "--out", "/tmp/x"), "needs --from"),
])
def test_user_errors_are_one_line(args, needle):
    p = envgen(*args, check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_policy_is_one_line(travel):
    out, _ = travel
    p = envgen("run", str(out), "--policy", "gpt", check=False)
    assert p.returncode == 2 and "unknown policy 'gpt'" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_train_errors_are_one_line(travel):
    pytest.importorskip("trl")
    out, _ = travel
    p = envgen("train", "--pack", str(out), "--model", "x", "--set", "nonsense", check=False)
    assert p.returncode == 2 and "--set 'nonsense': write KEY=VALUE" in p.stderr


def test_progress_bars_show_their_totals(travel, tmp_path):
    """Without --json, long commands draw a rich bar on stderr whose total is known up front (N/N at the end)."""
    out, _ = travel
    assert "20/20" in envgen("validate", str(out)).stderr
    pack = tmp_path / "travel"
    shutil.copytree(out, pack)
    p = envgen("check", str(pack), "--policy", "oracle", "--k", "5", "--store", str(tmp_path / "s.sqlite"),
               "--plot", str(tmp_path / "h.png"))
    assert "rollouts (at most tasks x k; stops early)" in p.stderr and "100/100" in p.stderr
    p = envgen("eval", str(pack), "--policy", "oracle", "--policy", "null", "--sample", "3", "--k", "2",
               "--store", str(tmp_path / "s.sqlite"))
    assert "12/12" in p.stderr and "pass@2" in p.stdout
    assert "4/4" in envgen("build", "general", "--category", "travel-planning", "--tasks", "4",
                           "--out", str(tmp_path / "small")).stderr


def test_ls_searches_nested_folders(travel, tmp_path):
    out, _ = travel
    for rel in ("a/one", "a/b/c/two", "three", ".hidden/four"):
        shutil.copytree(out, tmp_path / rel)
    shutil.copytree(out, tmp_path / "a" / "one" / "env" / "inner")  # inside a pack: not searched
    (tmp_path / "a" / "broken").mkdir()
    (tmp_path / "a" / "broken" / "pack.json").write_text("{")
    rows = json.loads(envgen("ls", str(tmp_path), "--json").stdout)
    assert [r["relative"] for r in rows] == ["a/b/c/two", "a/broken", "a/one", "three"]
    assert all(r["tasks"] == 20 and r["family"] == "general" for r in rows if r["relative"] != "a/broken")
    assert "pack.json" in rows[1]["error"]
    p = envgen("ls", str(tmp_path))
    assert "3 pack(s) under" in p.stdout and "a/b/c/two" in p.stdout and "general/travel-planning" in p.stdout
    assert "broken pack:" in p.stderr and "a/broken" not in p.stdout
    assert json.loads(envgen("ls", str(tmp_path / "three"), "--json").stdout)[0]["relative"] == "."
    p = envgen("ls", str(tmp_path / "nope"), check=False)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "no such directory" in p.stderr and p.stdout == ""
    p = envgen("ls", str(tmp_path / "three" / "pack.json"), check=False)
    assert p.returncode == 2 and "pack.json: not a directory" in p.stderr


def test_code_build_and_export_in_json(tmp_path):
    shas = make_calc_repo(tmp_path / "calc")
    built = json.loads(envgen("build", "code", "--from", f"git:{tmp_path / 'calc'}", "--out", str(tmp_path / "out"),
                              "--sandbox", "local", "--no-gate", "--store", str(tmp_path / "s.sqlite"),
                              "--json").stdout)
    assert built["kept"] == 2
    ids = sorted(f"calc-{shas[c][:12]}" for c in ("fix", "power"))
    res = json.loads(envgen("export", "swebench", str(tmp_path / "out"), "--out", str(tmp_path / "x.jsonl"),
                            "--json").stdout)
    assert res["instances"] == 2 and sorted(res["instance_ids"]) == ids and "rows" not in res
    assert sorted(json.loads(line)["instance_id"] for line in (tmp_path / "x.jsonl").read_text().splitlines()) == ids
    res = json.loads(envgen("export", "swebench", str(tmp_path / "out"), "--json").stdout)
    assert res["out"] is None and sorted(r["instance_id"] for r in res["rows"]) == ids


@pytest.mark.docker
def test_docker_commands_in_json(docker_tiny_pack, tmp_path):
    pack = tmp_path / "tiny"
    shutil.copytree(docker_tiny_pack.root, pack)
    built = json.loads(envgen("image", "build", str(pack), "--json").stdout)
    assert built["tag"] == docker_tiny_pack.manifest.image.tag and built["digest"].startswith("sha256:")
    base = json.loads(envgen("image", "base", "--suite", "bookworm", "--json").stdout)
    assert base["tag"].startswith("envgen") and base["suite"] == "bookworm"
    gc = json.loads(envgen("sandbox", "gc", "--json").stdout)
    assert isinstance(gc["removed"], int) and gc["all"] is False


def test_json_output_is_the_only_thing_on_stdout(tmp_path):
    """Whatever a library or a child process prints while a --json command works goes to stderr."""
    script = tmp_path / "noisy.py"
    script.write_text(
        "import os, sys\n"
        "import envgen.build.family as fam\n"
        "from envgen import cli\n"
        "real = fam.Family.categories\n"
        "def noisy(self):\n"
        "    print('library noise')\n"
        "    os.system('echo child noise')\n"
        "    return real(self)\n"
        "fam.Family.categories = noisy\n"
        "sys.argv = ['envgen', *sys.argv[1:]]\n"
        "cli.main()\n")
    p = subprocess.run([sys.executable, str(script), "families", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert {f["family"] for f in json.loads(p.stdout)} >= {"general", "search"}
    assert "library noise" in p.stderr and "child noise" in p.stderr
    p = subprocess.run([sys.executable, str(script), "families"], capture_output=True, text=True, timeout=120)
    assert "library noise" in p.stdout and "travel-planning" in p.stdout
