"""The layers the code keeps: the file-format contract is a leaf, the generator stands on it alone,
and no import, at the top of a module or inside a function, closes a cycle.

The contract is the package ``runtime.contract``, the part both halves share: the rendered
file's format (``rendered``), the dialect table (``dialects``), parameter style (``sqltext``),
the errors (``errors``) and the schedules' declaration and slots (``schedule_slots``). It imports
nothing but the standard library and itself, so the generator (`qgen render`, `qgen check`) never
loads the consumer, the drivers or the forms, and `import runtime` stays cheap (its public names
load on first use).

The import graph counts every import statement, inside functions and under TYPE_CHECKING too:
``from a import b`` is an edge to ``a`` (its ``__init__`` runs) and to ``a.b`` when that is a
module. Layers, bottom up: the contract; the drivers (runtime.drivers.*, runtime.connect,
runtime.adapters), which import only the contract and each other; everything else of the runtime
(queue, operate, verify, outbox, consumer, forms, …). No runtime module imports the ``runtime``
package itself (its lazy ``__init__`` imports them all), and the forms, settle, verify, operate
and status never reach ``runtime.queue``: they take a loaded file (runtime.loaded) instead.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: optional libraries a contract module may import where it needs them (inside a function):
#: cron expressions are read by cronsim, which only a queue with schedules needs
CONTRACT_OPTIONAL = {"cronsim"}
GENERATOR = ["qgen/build.py", "qgen/declaration.py", "qgen/render.py", "qgen/validate.py"]
DRIVERS = {"runtime.connect", "runtime.adapters"}  # with every runtime.drivers.* module
#: the parts a Queue imports: none of them may reach runtime.queue
UNDER_QUEUE = [
    "runtime.apply",
    "runtime.completer",
    "runtime.forms",
    "runtime.operate",
    "runtime.progress",
    "runtime.settle",
    "runtime.status",
    "runtime.verify",
]
#: qgen modules whose operating commands (worker, verify, apply, stats, serve, demo, …) load the
#: runtime inside their functions: the top of every qgen module imports only the contract
OPERATING = {"qgen.cli", "qgen.serve", "qgen.demo", "qgen.targets"}


def module_files() -> dict[str, Path]:
    """Every module of runtime/ and qgen/, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in ("runtime", "qgen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


#: the contract package and the lazy ``runtime/__init__`` above it
CONTRACT = {"runtime"} | {n for n in module_files() if n.split(".")[:2] == ["runtime", "contract"]}


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    #: inside a function (run when it is called), not at the module's top
    lazy: bool


def imports_of(name: str, source: str, known: Iterable[str]) -> list[Import]:
    """The imports of module ``name`` that reach a module in ``known`` (every statement:
    module level, inside functions, under TYPE_CHECKING)."""
    known = set(known)
    is_package = name in {n.rsplit(".", 1)[0] for n in known if "." in n}
    tree = ast.parse(source)
    lazy_nodes = _inside_functions(tree)
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([base] if base else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                out.append(Import(target, node.lineno, id(node) in lazy_nodes))
    return out


def _inside_functions(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside a function's body."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if inner is not node
    }


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    return {n: {i.target for i in imports_of(n, s, sources)} for n, s in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: for each strongly connected component of more than one module (or
    a module importing itself), one closed path through it, ``[a, b, …, a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_closed_path(graph, set(c)) for c in components]


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if w not in came:
                    came[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(component)}")


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches, each with the module that imports it on the way."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop()
        for w in sorted(graph.get(v, ())):
            if w not in seen and w != start:
                seen[w] = v
                todo.append(w)
    return seen


def _sources() -> dict[str, str]:
    return {n: p.read_text() for n, p in module_files().items()}


def _layer(name: str) -> str:
    if name in CONTRACT - {"runtime"}:
        return "contract"
    if name.startswith("runtime.drivers") or name in DRIVERS:
        return "drivers"
    return "runtime" if name.split(".")[0] == "runtime" else "qgen"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (absolute names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_contract_imports_only_the_standard_library_and_itself() -> None:
    files = module_files()
    for module in sorted(CONTRACT - {"runtime"}):
        path = files[module]
        for name in imported_modules(path):
            top = name.split(".")[0]
            allowed = top in sys.stdlib_module_names or top in CONTRACT_OPTIONAL
            assert name in CONTRACT or (top != "runtime" and allowed), (
                f"{path.relative_to(ROOT)} imports {name}: the contract may import only the "
                "standard library and other contract modules"
            )


def test_the_generator_depends_on_the_contract_only() -> None:
    for relative in GENERATOR:
        runtime_imports = {
            n for n in imported_modules(ROOT / relative) if n.split(".")[0] == "runtime"
        }
        assert runtime_imports <= CONTRACT, (
            f"{relative} imports {sorted(runtime_imports - CONTRACT)} from the runtime; the "
            "generator may use only the contract modules"
        )


def test_qgen_render_never_loads_the_consumer(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from qgen.cli import main\n"
        "try:\n"
        f"    main(['render', '--dialect', 'postgres', '--out', {str(tmp_path / 'sql')!r}])\n"
        "except SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        "print('LOADED', *sorted(m for m in sys.modules if m.split('.')[0] == 'runtime'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT / "generated_examples",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.splitlines()[-1].split()[1:])
    assert (tmp_path / "sql" / "postgres" / "orders.sql").exists()
    assert "runtime.contract.dialects" in loaded, (
        "the probe must have rendered through the contract"
    )
    assert loaded <= CONTRACT, f"qgen render loaded {sorted(loaded - CONTRACT)}"


def test_import_runtime_loads_public_names_on_first_use() -> None:
    probe = (
        "import sys, runtime\n"
        "before = sorted(m for m in sys.modules if m.startswith('runtime.'))\n"
        "runtime.Consumer, runtime.ack, runtime.load\n"
        "print(' '.join(before)); print('runtime.consumer' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    before, consumer_loaded = done.stdout.splitlines()
    assert before == "", f"import runtime loaded {before}"
    assert consumer_loaded == "True"


def test_every_public_name_resolves() -> None:
    import runtime

    for name in runtime.__all__:
        assert getattr(runtime, name) is not None, name
    assert "Consumer" in dir(runtime)


def test_a_function_named_like_its_module_stays_the_function() -> None:
    probe = (
        "import runtime.connect, runtime.apply, runtime\n"
        "import inspect\n"
        "print(inspect.isfunction(runtime.connect), inspect.isfunction(runtime.apply))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_the_cycle_finder_reports_a_cycle_through_lazy_and_type_checking_imports() -> None:
    synthetic = {
        "runtime": "",
        "runtime.a": "from runtime.b import thing\n",
        "runtime.b": "def later():\n    import runtime.c\n",
        "runtime.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runtime import a\n",
        "runtime.d": "import runtime.a\n",
    }
    graph = import_graph(synthetic)
    assert graph["runtime.c"] == {"runtime", "runtime.a"}, "from runtime import a: both nodes"
    assert cycles(graph) == [["runtime.a", "runtime.b", "runtime.c", "runtime.a"]]
    (lazy,) = imports_of("runtime.b", synthetic["runtime.b"], synthetic)
    assert lazy == Import("runtime.c", 2, lazy=True)
    del synthetic["runtime.c"]
    assert cycles(import_graph(synthetic)) == []
    assert cycles({"x": {"x"}}) == [["x", "x"]]


def test_no_import_cycle_in_runtime_or_qgen() -> None:
    sources = _sources()
    graph = import_graph(sources)
    assert len(graph) > 60 and graph["runtime.queue"], "the graph must hold the real modules"
    lines = []
    for cycle in cycles(graph):
        steps = []
        for here, there in itertools.pairwise(cycle):
            found = next(i for i in imports_of(here, sources[here], sources) if i.target == there)
            where = "inside a function" if found.lazy else "at the top"
            steps.append(f"{here}:{found.line} imports {there} ({where})")
        lines.append(" → ".join(cycle) + "\n    " + "\n    ".join(steps))
    assert not lines, "import cycles:\n" + "\n".join(lines)


def _runtime_imports(name: str, sources: dict[str, str]) -> list[Import]:
    return imports_of(name, sources[name], sources)


def test_the_drivers_import_only_the_contract_and_each_other() -> None:
    sources = _sources()
    drivers = [n for n in sources if _layer(n) == "drivers"]
    assert {"runtime.drivers.postgres", "runtime.connect", "runtime.adapters"} <= set(drivers)
    for name in drivers:
        for found in _runtime_imports(name, sources):
            assert _layer(found.target) in ("contract", "drivers"), (
                f"{name}:{found.line} imports {found.target}: a driver may import only the "
                "contract and the drivers"
            )


def test_no_runtime_module_imports_the_package_or_the_generator() -> None:
    sources = _sources()
    for name in sources:
        if _layer(name) == "qgen" or name == "runtime":
            continue
        for found in _runtime_imports(name, sources):
            assert found.target != "runtime", (
                f"{name}:{found.line} imports the runtime package (its __init__ imports every "
                "public module): import the submodule, e.g. `from runtime.loading import load`"
            )
            assert _layer(found.target) != "qgen", f"{name}:{found.line} imports {found.target}"


def test_the_parts_a_queue_imports_never_reach_the_queue() -> None:
    graph = import_graph(_sources())
    under = [n for n in graph if any(n == u or n.startswith(u + ".") for u in UNDER_QUEUE)]
    assert "runtime.forms.advisory" in under
    for name in under:
        seen = reachable(graph, name)
        if "runtime.queue" in seen:
            path = ["runtime.queue"]
            while path[-1] != name:
                path.append(seen[path[-1]])
            raise AssertionError(f"{name} reaches runtime.queue: {' → '.join(reversed(path))}")


def test_the_generator_imports_the_runtime_only_inside_its_operating_commands() -> None:
    sources = _sources()
    for name in (n for n in sources if _layer(n) == "qgen"):
        for found in _runtime_imports(name, sources):
            if _layer(found.target) not in ("runtime", "drivers") and found.target != "runtime":
                continue
            assert found.lazy and name in OPERATING, (
                f"{name}:{found.line} imports {found.target}: the generator imports only the "
                "contract (an operating command may load the runtime inside its function)"
            )


def test_cronsim_is_imported_only_inside_functions() -> None:
    for name in sorted(CONTRACT - {"runtime"}):
        path = module_files()[name]
        tree = ast.parse(path.read_text())
        lazy = _inside_functions(tree)
        for node in ast.walk(tree):
            if id(node) in lazy or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            optional = {n.split(".")[0] for n in names if n} & CONTRACT_OPTIONAL
            assert not optional, (
                f"{path.relative_to(ROOT)}:{node.lineno} imports {sorted(optional)} outside a "
                "function: a queue without schedules must not need it"
            )
