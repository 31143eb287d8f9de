"""The package's shape, checked by parsing it: no import cycles, no envgen imports hidden inside functions,
sandbox-side code on the standard library only, and generators that do not reach into tool internals."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Sandbox-side extras a family or the kit may use: optional, so only inside `try: ... except ImportError`.
OPTIONAL_IN_SANDBOX = {"math_verify", "sympy"}
KIT = "envgen_verifiers"


def envgen_modules(root: Path = ROOT, package: str = "envgen") -> dict[str, Path]:
    """Dotted module name -> file, for every module of a package (``root/package``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Absolute dotted names an import statement may load (``from a import b`` may load ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = (module if is_package else module.rpartition(".")[0]).split(".")
        base = base[: len(base) - node.level + 1]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    return [origin] + [f"{origin}.{a.name}" for a in node.names]


def import_graph(root: Path = ROOT, package: str = "envgen") -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(module -> the package's modules it imports at any depth, [(module, line, target) for imports in
    functions])."""
    modules = envgen_modules(root, package)
    top = package.rpartition("/")[2]
    graph: dict[str, set[str]] = {m: set() for m in modules}
    in_functions = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        parents = _parents(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported_names(node, mod, path.name == "__init__.py"):
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if not name or name == mod or mod.startswith(name + "."):
                    continue  # a package the importer is inside is loaded before the importer anyway
                graph[mod].add(name)
                # importing a.b.c runs a/b/__init__ first: an edge to each package the importer is not inside
                pkg = name.rpartition(".")[0]
                while pkg and pkg not in (top, mod) and not mod.startswith(pkg + "."):
                    graph[mod].add(pkg)
                    pkg = pkg.rpartition(".")[0]
                if _in_function(node, parents) and (mod, node.lineno, name) not in in_functions:
                    in_functions.append((mod, node.lineno, name))
    return graph, in_functions


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:  # walk inside the component from its smallest module until a module repeats
        path = [min(comp)]
        while True:
            nxt = min(w for w in graph[path[-1]] if w in comp)
            if nxt in path:
                out.append(path[path.index(nxt):] + [nxt])
                break
            path.append(nxt)
    return out


def test_cycle_finder_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "envgen"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from .a import y\n")
    graph, in_functions = import_graph(tmp_path)
    assert cycles(graph) == [["envgen.a", "envgen.sub.b", "envgen.a"]]
    assert in_functions == [("envgen.sub.b", 2, "envgen.a")]
    (pkg / "sub" / "__init__.py").write_text("from ..c import z\n")  # a -> sub (package init) -> c -> a
    graph, _ = import_graph(tmp_path)
    assert ["envgen.a", "envgen.sub", "envgen.c", "envgen.a"] in cycles(graph)


def test_the_package_has_no_import_cycles():
    graph, _ = import_graph()
    assert len(graph) > 40 and sum(map(len, graph.values())) > 150  # the parse saw the package
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_verifier_kit_has_no_import_cycles():
    graph, _ = import_graph(ROOT / "verifiers", KIT)
    assert len(graph) > 15 and f"{KIT}.tests" in graph[f"{KIT}"]  # the parse saw the kit
    found = cycles(graph)
    assert not found, "import cycles in the verifier kit:\n" + "\n".join(" -> ".join(c) for c in found)


# The layers of envgen, bottom first: a module may import its own layer and the ones below, never above.
LAYERS = [
    {"errors", "paths", "store"},  # the error hierarchy, bundled-file and cache paths, the state store
    {"pack"},  # format, content hash, Hub, opening a path or hf:// id
    {"sandbox"},  # local and Docker backends, engine, images, warm pool
    {"llm"},  # client with thinking retention, agents, roles, the rubric judge
    {"episodes"},  # one episode, action parsing, the Gymnasium env
    {"policies"},  # oracle, null, OpenAI-compatible endpoints, local transformers
    {"passcheck"},  # keep rules, executors, envgen check / eval, the rollout ledger
    {"build"},  # the Family interface, generator SDK, red-team gate, offline build, LLM-pipeline runner
    {"retrieval"},  # search backends and corpora for the generator agents
    {"families", "importers"},  # general, search, code (host side); importers of existing suites (tau2-bench)
    {"rl"},  # TRL adapter and trainer
    {"serve"},  # envgen serve: packs' episodes as OpenEnv sessions (its client, the remote backend, is in sandbox)
    {"cli", "__main__"},
]


def layer_of(module: str) -> int:
    """The index in LAYERS of an envgen module (-1 for the package itself)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    found = [i for i, names in enumerate(LAYERS) if parts[1] in names]
    assert found, f"{module}: its top-level name {parts[1]!r} is in no layer; add it to LAYERS"
    return found[0]


def test_imports_only_point_down():
    graph, _ = import_graph()
    up = [f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)]
    assert not up, "imports that point up a layer:\n" + "\n".join(sorted(up))
    across = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
              if a.startswith("envgen.families.") and b.startswith("envgen.families.") and a.split(".")[2] != b.split(".")[2]]
    assert not across, "a family imports another family:\n" + "\n".join(sorted(across))


def test_the_layer_check_catches_an_upward_import(tmp_path):
    pkg = tmp_path / "envgen"
    (pkg / "pack").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pack" / "__init__.py").write_text("from ..episodes import gym\n")
    (pkg / "episodes").mkdir()
    (pkg / "episodes" / "__init__.py").write_text("")
    (pkg / "episodes" / "gym.py").write_text("")
    graph, _ = import_graph(tmp_path)
    assert {(a, b) for a, ts in graph.items() for b in ts if layer_of(b) > layer_of(a)} == {
        ("envgen.pack", "envgen.episodes"), ("envgen.pack", "envgen.episodes.gym")}


# Optional heavy dependencies: an envgen module that imports one at its top may be imported inside a function.
HEAVY = {"torch", "trl", "transformers", "ray"}
# Modules whose function-level envgen imports are allowed, and why.
LAZY_IMPORTERS = {
    # The top layer (nothing imports it, so it closes no cycle): each command loads what it runs, so
    # `envgen --help` and light commands start in about a second instead of loading every family.
    "envgen.cli",
}


def heavy_modules(root: Path = ROOT) -> set[str]:
    """envgen modules that load a HEAVY package when imported (directly or through top-level envgen imports)."""
    modules = envgen_modules(root)
    direct, top_edges = set(), {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _imported_names(node, mod, path.name == "__init__.py"):
                    if name.partition(".")[0] in HEAVY:
                        direct.add(mod)
                    while name and name not in modules:
                        name = name.rpartition(".")[0]
                    if name and name != mod:
                        top_edges[mod].add(name)
    heavy, grew = set(direct), True
    while grew:
        more = {m for m, ts in top_edges.items() if m not in heavy and ts & heavy}
        heavy |= more
        grew = bool(more)
    return heavy


def test_no_envgen_import_hides_inside_a_function():
    heavy = heavy_modules()
    assert {"envgen.rl.trainer", "envgen.rl.stabilizers"} <= heavy and "envgen.episodes.gym" not in heavy
    _, in_functions = import_graph()
    hidden = [(m, line, t) for m, line, t in in_functions if m not in LAZY_IMPORTERS and t not in heavy]
    assert not hidden, ("import envgen modules at the top (move a shared piece down to break a cycle):\n"
                        + "\n".join(f"{m}:{line}: {t}" for m, line, t in hidden))


# ---------------------------------------------------------------- the sandbox boundary


SANDBOX_DIRS = ("env", "hidden")
"""Folders of envs/<family>/ and envs/<family>/<category>/ whose files go to a pack's env/ and hidden/."""


def sandbox_files(root: Path = ROOT) -> list[Path]:
    """Every Python file that runs inside a sandbox: the runtime, the workspace tools, every env/ and hidden/
    folder of a family or a category (tool and verifier code), and the verifier kit."""
    envs = root / "envs"
    files = set(envs.glob("runtime/**/*.py")) | set(envs.glob("workspace/**/*.py"))
    for d in SANDBOX_DIRS:
        files |= set(envs.glob(f"*/{d}/**/*.py")) | set(envs.glob(f"*/*/{d}/**/*.py"))
    files |= set((root / "verifiers").rglob("*.py"))
    return sorted(files)


def test_envs_hold_only_generators_and_sandbox_files():
    """envs/ is laid out like a pack: each category folder holds its host-side generator.py, and every other
    Python file is in a sandbox folder (so the boundary check below sees it): a tools.py or verify.py left
    beside a generator would go unchecked."""
    envs = ROOT / "envs"
    sandbox = set(sandbox_files())
    stray = [str(p.relative_to(ROOT)) for p in sorted(envs.rglob("*.py"))
             if p not in sandbox and not (p.name == "generator.py" and len(p.relative_to(envs).parts) == 3)]
    assert not stray, "move these into an env/ or hidden/ folder of their family or category:\n" + "\n".join(stray)
    generators = sorted(envs.glob("*/*/generator.py"))
    assert len(generators) >= 3 and not [g for g in generators if g.parent.name in SANDBOX_DIRS]


def _guarded_by_import_error(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    child = node
    while child in parents:
        parent = parents[child]
        if isinstance(parent, ast.Try) and child in parent.body:
            for h in parent.handlers:
                names = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                if any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
                       for n in names):
                    return True
        child = parent
    return False


def foreign_imports(path: Path, base: Path = ROOT) -> list[str]:
    """Imports in a sandbox-side file of anything but the standard library, the kit, its own folder's modules
    or (inside try/except ImportError) an optional extra."""
    tree = ast.parse(path.read_text(), str(path))
    parents = _parents(tree)
    siblings = {p.stem for p in path.parent.glob("*.py")}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [a.name.partition(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                continue  # inside the kit's own package
            tops = [(node.module or "").partition(".")[0]]
        else:
            continue
        for top in tops:
            if top in sys.stdlib_module_names or top == KIT or top in siblings:
                continue
            if top in OPTIONAL_IN_SANDBOX and _guarded_by_import_error(node, parents):
                continue
            bad.append(f"{path.relative_to(base)}:{node.lineno}: {top}")
    return bad


def test_the_boundary_check_catches_foreign_imports(tmp_path):
    f = tmp_path / "tools.py"
    f.write_text("import json, sqlite3\nimport envgen_verifiers\ntry:\n    import sympy\nexcept ImportError:\n"
                 "    sympy = None\nimport math_verify\nfrom envgen.pack import Pack\ndef f():\n    import numpy\n")
    assert foreign_imports(f, tmp_path) == ["tools.py:7: math_verify", "tools.py:8: envgen", "tools.py:10: numpy"]


def test_the_boundary_check_scans_every_sandbox_folder(tmp_path):
    inside = ["envs/runtime/server.py", "envs/workspace/tools.py", "envs/fam/env/tools.py",
              "envs/fam/hidden/shared.py", "envs/fam/cat/env/tools.py", "envs/fam/cat/env/lib/util.py",
              "envs/fam/cat/hidden/verify.py", "verifiers/kit/check.py"]
    for rel in inside + ["envs/fam/cat/generator.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("import numpy\n")
    found = sandbox_files(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in found) == sorted(inside)  # the generator runs on the host
    assert [b for p in found for b in foreign_imports(p, tmp_path)] == [f"{rel}:1: numpy" for rel in sorted(inside)]


def test_sandbox_side_code_imports_only_the_standard_library():
    files = sandbox_files()
    names = {str(p.relative_to(ROOT)) for p in files}
    assert {"envs/runtime/server.py", "envs/runtime/supervisor.py", "envs/runtime/verifier.py",
            "envs/workspace/tools.py", "envs/search/env/tools.py", "envs/code/env/tools.py",
            "envs/general/travel_planning/env/tools.py", "envs/general/travel_planning/hidden/verify.py",
            "envs/general/library_catalog/env/tools.py", "envs/general/library_catalog/hidden/verify.py",
            "verifiers/envgen_verifiers/answer.py"} <= names  # not vacuous: a wrong glob finds too few
    assert len([n for n in names if n.startswith("envs/") and {"env", "hidden"} & set(n.split("/")[1:-1])]) >= 6
    assert len(files) >= 15 and not [n for n in names if n.endswith("generator.py")]
    bad = [b for p in files for b in foreign_imports(p)]
    assert not bad, "sandbox-side code must not import these (never envgen):\n" + "\n".join(bad)


# ---------------------------------------------------------------- generators and tool modules


def private_tool_writes(path: Path, base: Path = ROOT) -> list[str]:
    """Assignments in a generator to a private global of a loaded tool module (``tools._DB = ...``)."""
    tree = ast.parse(path.read_text(), str(path))
    tool_vars = {"tools"}
    for node in ast.walk(tree):  # names bound to load_module(... "tools.py" ...)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and "tools" in ast.unparse(node.value):
            tool_vars |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    bad = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if (isinstance(t, ast.Attribute) and t.attr.startswith("_") and isinstance(t.value, ast.Name)
                    and t.value.id in tool_vars):
                bad.append(f"{path.relative_to(base)}:{node.lineno}: {t.value.id}.{t.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in tool_vars
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_")):
            bad.append(f"{path.relative_to(base)}:{node.lineno}: setattr({node.args[0].id}, {node.args[1].value!r})")
    return bad


def test_the_private_write_check_catches_one(tmp_path):
    f = tmp_path / "generator.py"
    f.write_text("t = load_module(HERE / 'tools.py', 'x')\nt._DB = 'a'\ntools.DB = 'b'\nsetattr(t, '_CON', 1)\n")
    assert private_tool_writes(f, tmp_path) == ["generator.py:2: t._DB", "generator.py:4: setattr(t, '_CON')"]


def test_generators_do_not_write_tool_internals():
    generators = sorted((ROOT / "envs").rglob("generator.py"))
    assert len(generators) >= 3
    bad = [b for g in generators for b in private_tool_writes(g)]
    assert not bad, "point ToolRecorder(tools, db=...) at a database instead:\n" + "\n".join(bad)
