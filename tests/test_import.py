"""`import memkit` is free: no litellm, no network, no files (DESIGN.md)."""

import subprocess
import sys
import textwrap


def test_import_memkit_loads_no_litellm_and_opens_no_files():
    code = textwrap.dedent(
        """
        import builtins, socket, sys
        opened = []
        real_open = builtins.open
        def spy_open(*a, **k):
            opened.append(a[0] if a else k.get("file"))
            return real_open(*a, **k)
        builtins.open = spy_open
        def no_net(*a, **k):
            raise AssertionError("network touched at import")
        socket.socket.connect = no_net
        import memkit
        builtins.open = real_open
        assert "litellm" not in sys.modules, "litellm imported"
        assert not opened, f"files opened at import: {opened}"
        print("ok", len(memkit.__all__))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ok")


def test_public_names_are_sorted_and_resolve_lazily():
    import memkit

    assert memkit.__all__ == sorted(memkit.__all__)
    assert memkit.truncate_bytes("abc", 2) == "ab\n…[truncated]"


def test_only_memkit_llm_imports_litellm():
    """DESIGN.md: litellm is imported lazily, and only by memkit/llm.py."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "memkit"
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "llm.py"
        and re.search(r"^\s*(import litellm|from litellm\b)", p.read_text(), re.M)
    ]
    assert offenders == []


def test_every_public_name_survives_its_submodules_being_imported():
    """A lazy export named like a submodule (`redact`) became the module once the
    store had imported `memkit.redact`: `from memkit import redact` then gave a
    module, and `memkit bench store` crashed calling it. In a fresh process, after
    loading every submodule, no public name may be a module."""
    code = textwrap.dedent(
        """
        import importlib, pkgutil, types
        import memkit
        for m in pkgutil.iter_modules(memkit.__path__):
            importlib.import_module(f"memkit.{m.name}")
        bad = [n for n in memkit.__all__ if isinstance(getattr(memkit, n), types.ModuleType)]
        assert not bad, bad
        print(memkit.redact("password=hunter2"))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "hunter2" not in out.stdout
