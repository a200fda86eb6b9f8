"""The layers the code keeps: the file-format contract is a leaf, the generator stands on it alone.

The contract is the part of `runtime` both halves share: the rendered file's format
(runtime.rendered), the dialect table (runtime.dialects), parameter style (runtime.sqltext), the
errors (runtime.errors) and the schedules' declaration and slots (runtime.schedule_slots). It imports nothing but the standard library and itself, so the
generator (`qgen render`, `qgen check`) never loads the consumer, the drivers or the forms, and
`import runtime` stays cheap (its public names load on first use).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = {
    "runtime",
    "runtime.dialects",
    "runtime.errors",
    "runtime.rendered",
    "runtime.schedule_slots",
    "runtime.sqltext",
}
#: optional libraries a contract module may import where it needs them (inside a function):
#: cron expressions are read by cronsim, which only a queue with schedules needs
CONTRACT_OPTIONAL = {"cronsim"}
GENERATOR = ["qgen/build.py", "qgen/declaration.py", "qgen/render.py", "qgen/validate.py"]


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
    for module in sorted(CONTRACT - {"runtime"}):
        path = ROOT / (module.replace(".", "/") + ".py")
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
    assert "runtime.dialects" in loaded, "the probe must have rendered through the contract"
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
