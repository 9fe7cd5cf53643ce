"""Import boundaries of the library, read from the source (ast), not from a run."""

from __future__ import annotations

import ast
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


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in MEMKIT.rglob("*.py")}


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every memkit module `path` imports, at module level or inside a function."""
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


def test_no_import_cycle_in_memkit():
    modules = _modules()
    graph = {n: _imports(p, n, modules) - {n} for n, p in modules.items()}
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
    assert cycles == []


def test_importing_the_store_loads_no_consolidation_and_no_llm():
    code = textwrap.dedent(
        """
        import sys
        import memkit.store
        bad = sorted(m for m in sys.modules
                     if m.startswith("memkit.consolidate") or m in ("memkit.llm", "litellm"))
        print(bad)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- who may import what -------------------------------------------------------------

STORE_MODULES = {
    "memkit.store",
    "memkit.store_index",
    "memkit.store_rows",
    "memkit.store_db",
    "memkit.schema",
    "memkit.store_copy",
}
"""The only modules that talk to SQLite (CONTRIBUTING: SQLite at the edges)."""

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
    "memkit.store",
    "memkit.stores",
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
