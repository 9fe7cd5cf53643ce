"""Import boundaries of the library, read from the source (ast), not from a run."""

from __future__ import annotations

import ast
import contextlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMKIT = ROOT / "memkit"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(*packages: str) -> dict[str, Path]:
    return {_module_name(p): p for top in packages for p in (ROOT / top).rglob("*.py")}


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every module of `modules` that `path` imports, at module level or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in out if m in modules}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of `graph` (module -> modules it imports) meets."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m) :], m])
            elif m not in state:
                visit(m, [*stack, m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return cycles


def test_the_cycle_walk_finds_a_cycle_and_passes_a_chain():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_in_memkit_or_evals():
    """Imports inside functions count too: a cycle hidden in a function is still a
    cycle (which module can be read, tested and moved first is then unclear)."""
    modules = _modules("memkit", "evals")
    assert "evals.sweep" in modules and "memkit.store" in modules
    graph = {n: _imports(p, n, modules) - {n} for n, p in modules.items()}
    assert import_cycles(graph) == []


def test_importing_the_store_loads_no_consolidation_and_no_llm():
    code = textwrap.dedent(
        """
        import sys
        import memkit.store
        bad = sorted(m for m in sys.modules
                     if m.startswith("memkit.consolidate")
                     or m in ("memkit.llm", "litellm", "psycopg", "pgvector"))
        print(bad)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- who may import what -------------------------------------------------------------

STORE_MODULES = {
    "memkit.store.sqlite",
    "memkit.store.index",
    "memkit.store.rows",
    "memkit.store.sqlite_db",
    "memkit.store.schema",
    "memkit.store.copy",
}
"""The only modules that talk to SQLite (CONTRIBUTING: SQLite at the edges)."""

PG_MODULES = {"memkit.store.postgres", "memkit.store.copy", "memkit.store.pg_ann"}
"""The only modules that talk to Postgres (psycopg, pgvector), lazily."""

DOCUMENTED = {
    "memkit",
    "memkit.assemble",
    "memkit.checks",
    "memkit.consolidate",
    "memkit.embed",
    "memkit.errors",
    "memkit.llm",
    "memkit.local_server",
    "memkit.params",
    "memkit.proposal",
    "memkit.runs",
    "memkit.store",
    "memkit.store.gram_index",
    "memkit.store.fold_postings",
    "memkit.store.rank",
    "memkit.text",
    "memkit.tools",
    "memkit.types",
    "memkit.worker",
}
"""Submodules whose API CONTRIBUTING's module contracts document: what evals may use."""


def _all_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in a file, lazy ones included; names is
    empty for `import x`."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


def _import_strings(path: Path) -> list[str]:
    """String constants naming a module to import (import_module("x"), "x.y:attr")."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
    return out


def _memkit_files():
    return sorted(MEMKIT.rglob("*.py"))


def test_only_store_modules_import_sqlite3():
    offenders = {
        _module_name(p)
        for p in _memkit_files()
        for mod, _ in _all_imports(p)
        if mod.split(".")[0] == "sqlite3"
    }
    assert offenders <= STORE_MODULES, sorted(offenders - STORE_MODULES)


def test_only_postgres_modules_import_psycopg():
    offenders = {
        _module_name(p)
        for p in _memkit_files()
        for mod, _ in _all_imports(p)
        if mod.split(".")[0] in ("psycopg", "pgvector")
    }
    assert offenders and offenders <= PG_MODULES, sorted(offenders - PG_MODULES)


def test_memkit_never_imports_evals_not_even_by_string():
    import re

    named = re.compile(r"^evals(\.[A-Za-z_]\w*)*(:\w+)?$")
    offenders = [
        (str(p.relative_to(ROOT)), mod)
        for p in _memkit_files()
        for mod, _ in _all_imports(p)
        if mod.split(".")[0] == "evals"
    ] + [
        (str(p.relative_to(ROOT)), s)
        for p in _memkit_files()
        for s in _import_strings(p)
        if named.match(s)
    ]
    assert offenders == []


def test_only_memkit_llm_imports_litellm():
    offenders = [
        _module_name(p)
        for p in _memkit_files()
        for mod, _ in _all_imports(p)
        if mod.split(".")[0] == "litellm" and p.name != "llm.py"
    ]
    assert offenders == []


def test_evals_uses_only_public_documented_memkit_names():
    import importlib

    import memkit

    bad = []
    for p in sorted((ROOT / "evals").rglob("*.py")):
        for mod, names in _all_imports(p):
            if mod != "memkit" and not mod.startswith("memkit."):
                continue
            where = f"{p.relative_to(ROOT)}: {mod}"
            if mod not in DOCUMENTED:
                bad.append(f"{where} is not a documented submodule")
                continue
            module = importlib.import_module(mod)
            public = set(getattr(module, "__all__", ()))
            for name in names:
                if mod == "memkit" and f"memkit.{name}" in DOCUMENTED:
                    continue  # `from memkit import llm`: a documented submodule
                if mod == "memkit" and name not in memkit.__all__:
                    bad.append(f"{where}.{name} is not in memkit.__all__")
                elif name.startswith("_") or (public and name not in public):
                    bad.append(f"{where}.{name} is not public")
                elif not hasattr(module, name):
                    bad.append(f"{where}.{name} does not exist")
    assert bad == [], bad


def test_every_exception_memkit_raises_is_a_memkit_error():
    """`raise X(...)` / `raise X` with X a class must name a MemkitError subclass;
    re-raising a caught exception (`raise`, `raise exc`) is not a new error. The
    protocol exceptions are exempt: SystemExit (the CLI's exit status), task
    cancellation, and AttributeError from a module's `__getattr__`."""
    import builtins
    import importlib

    from memkit.errors import MemkitError

    allowed = {"SystemExit", "CancelledError", "StopIteration", "StopAsyncIteration"}
    bad = []
    for p in _memkit_files():
        module = importlib.import_module(_module_name(p))
        tree = ast.parse(p.read_text(encoding="utf-8"))
        in_getattr = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.attr if isinstance(exc, ast.Attribute) else getattr(exc, "id", None)
            if name is None or name in allowed:
                continue
            if name == "AttributeError" and id(node) in in_getattr:
                continue
            cls = getattr(module, name, None) or getattr(builtins, name, None)
            if (
                isinstance(cls, type)
                and issubclass(cls, BaseException)
                and not issubclass(cls, MemkitError)
            ):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} raises {name}")
    assert bad == [], bad


# --- tests use memkit and evals through public names only ------------------------------

TESTS = ROOT / "tests"
OURS = ("memkit", "evals")
SAMPLE_MARK = "# a sample of what the check refuses"
_OUR_PATH = re.compile(r"(?:memkit|evals)(?:\.\w+)+(?::\w+)?")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names(tree: ast.AST) -> set[str]:
    """Private names a test file defines itself (its helpers, its fakes' attributes):
    `def _x`, `class _X`, `_x = ...`, `self._x = ...`. Reaching those is its own business."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
    return {n for n in own if _private(n)}


def _foreign_names(tree: ast.AST) -> set[str]:
    """Names bound by imports from anything but memkit and evals (os, argparse,
    other test files): their private names are not this project's."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in node.names if not _ours(a.name)}
        elif isinstance(node, ast.ImportFrom) and (node.level or not _ours(node.module or "")):
            out |= {a.asname or a.name for a in node.names}
    return out


def private_reaches(source: str, where: str = "<test>") -> list[str]:
    """Where a test's source reaches a private name of memkit or evals: an import
    (`from memkit.x import _y`, a private module), an attribute (`obj._y`, unless
    `obj` is self/cls or a name imported from elsewhere, or `_y` is the file's own),
    a string naming one (`setattr(obj, "_y", ...)`, `patch("memkit.x._y")`), and the
    same inside code held in a multi-line string (a script a test runs in a
    subprocess)."""
    tree = ast.parse(source)
    own, foreign = _own_private_names(tree), _foreign_names(tree)

    def ours_receiver(node: ast.AST) -> bool:
        return not (
            isinstance(node, ast.Name) and (node.id in ("self", "cls") or node.id in foreign)
        )

    bad = []
    for node in ast.walk(tree):
        at = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and not node.level and _ours(node.module or ""):
            names = [*node.module.split("."), *(a.name for a in node.names)]
            bad += [f"{at}: from {node.module} import {n}" for n in names if _private(n)][:1]
        elif isinstance(node, ast.Import):
            bad += [
                f"{at}: import {a.name}"
                for a in node.names
                if _ours(a.name) and any(map(_private, a.name.split(".")))
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if ours_receiver(node.value) and node.attr not in own:
                bad.append(f"{at}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            key = node.args[1]
            if (
                name in ("setattr", "getattr", "hasattr", "delattr", "object")
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and _private(key.value)
                and ours_receiver(node.args[0])
                and key.value not in own
            ):
                bad.append(f"{at}: {name}({ast.unparse(node.args[0])}, {key.value!r})")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if _OUR_PATH.fullmatch(text) and any(map(_private, re.split(r"[.:]", text))):
                bad.append(f"{at}: {text!r}")
            elif "\n" in text and ("memkit" in text or "evals" in text) and SAMPLE_MARK not in text:
                with contextlib.suppress(SyntaxError):
                    bad += private_reaches(textwrap.dedent(text), f"{at} (code in a string)")
    return bad


def test_the_private_reach_check_catches_each_form():
    reaches = private_reaches(
        textwrap.dedent(
            """
            # a sample of what the check refuses
            import os
            import memkit._hidden
            from memkit.llm import _retry_after
            from evals import report
            from memkit import local_server as ls
            report._bars(1)
            store = open_store()
            store._bulk_load("s", [])
            monkeypatch.setattr(report, "_figure_png", None)
            mock.patch("memkit.redact._open")
            CHILD = "from memkit import local_server as ls\\nls._check_port(0)\\n"
            os._exit(0)                      # not ours
            class Fake:
                def __init__(self):
                    self._n = 0              # its own
                def f(self, other):
                    return self._n + other._n + ls.__name__.__len__()
            """
        )
    )
    assert SAMPLE_MARK == "# a sample of what the check refuses"  # the sample is skipped below
    assert sorted(r.split(": ", 1)[1] for r in reaches) == [
        "'memkit.redact._open'",
        "from memkit.llm import _retry_after",
        "import memkit._hidden",
        "ls._check_port",
        "report._bars",
        "setattr(report, '_figure_png')",
        "store._bulk_load",
    ]


def test_tests_use_only_public_names_of_memkit_and_evals():
    """The suite tests behaviour, not internals (issue #20): no test imports or
    reaches a private name of memkit or evals; a capability a test needs is a
    documented public name first."""
    bad = []
    for p in sorted(TESTS.rglob("*.py")):
        bad += private_reaches(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    assert bad == [], bad
