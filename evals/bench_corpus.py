"""Build a real-text bench corpus of >= 1M distinct prose sentences from Debian's packages.

`memkit bench corpus [--out PATH] [--no-install]` installs the documentation and
dictionary packages in `SOURCES` with apt-get (root; `--no-install` uses what is
there), extracts their prose, keeps the sentences that pass `is_prose`, drops
repeats, shuffles them (seed 0) and writes one a line to PATH (default
`~/.cache/memkit/bench-corpus-debian.txt`, outside the repository: nothing of it is
committed) with a manifest beside it (PATH + `.manifest.json`: packages and their
versions, each package's licence lines, sentences per source, the rule, sha256).
The store bench reads the file with `--texts file:PATH`.

Why: the synthetic corpus's geometry is what the 1M-row HNSW recall was measured
on (#36), and the shared datasets hold only ~115k real sentences. This corpus is
technical and dictionary prose (manuals, API references, dictionaries), not agent
memories: a real language's geometry at 1M rows, not a memory workload.

The prose rule (`is_prose`): 30-200 characters; starts with an upper-case letter
and ends with `.`, `!` or `?` (a closing quote or bracket may follow); at least 5
words; at least 80 % of its characters letters or spaces; none of the characters
of `CODE_CHARS` (markup, shell and program syntax) nor a code token (`::`, `->`,
`()`, a dot inside a word as in `os.path`, an inline code span, which each
extractor replaces with a marker that is itself rejected). Extractors drop code
blocks whole: HTML `<pre>`, `<script>`, `<style>`; indented (literal) paragraphs of
reStructuredText, POD, AsciiDoc and Info; roff's `.nf`/`.EX` blocks.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import html
import json
import os
import random
import re
import subprocess
import tarfile
import textwrap
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memkit.errors import ConfigError

DEFAULT_OUT = "~/.cache/memkit/bench-corpus-debian.txt"
MARK = "\x00"
"""What an extractor puts where inline code stood: `is_prose` rejects it."""
CODE_CHARS = frozenset("{}[]<>=\\|$@#^~`_*/" + MARK)
_CODE_TOKEN = re.compile(r"::|->|\(\)|\w\.\w|\.\.")
_END = re.compile(r"[.!?][\"')\u201d\u2019]?$")
_SPLIT = re.compile(r"(?<=[.!?])[\"')\u201d\u2019]?\s+(?=[\"'(\u201c\u2018]?[A-Z])")


def is_prose(s: str) -> bool:
    """The module docstring's prose rule: a sentence a person wrote, not code or markup."""
    if not 30 <= len(s) <= 200 or not s[0].isupper() or not _END.search(s):
        return False
    if len(s.split()) < 5 or any(c in CODE_CHARS for c in s) or _CODE_TOKEN.search(s):
        return False
    if not s.isprintable():
        return False
    letters = sum(1 for c in s if c.isalpha() or c == " ")
    return letters >= 0.8 * len(s)


def sentences(block: str) -> Iterator[str]:
    """The prose sentences of one paragraph of plain text (whitespace normalised)."""
    text = " ".join(block.split())
    for s in _SPLIT.split(text):
        s = s.strip()
        if is_prose(s):
            yield s


def paragraphs(text: str, skip_indented: bool = True) -> Iterator[str]:
    """Blank-line separated paragraphs; an indented first line marks a literal or
    code block (reStructuredText, POD, AsciiDoc, Info), dropped whole."""
    for para in re.split(r"\n\s*\n", text):
        if not para.strip():
            continue
        if skip_indented and para.lstrip("\n")[:1] in (" ", "\t"):
            continue
        yield para


# --- extractors: one file's text -> paragraphs of plain text ---------------------------

_HTML_DROP = re.compile(r"<(pre|script|style|head)\b.*?</\1\s*>", re.S | re.I)
_HTML_CODE = re.compile(r"<(code|tt|kbd|samp|var)\b.*?</\1\s*>", re.S | re.I)
_HTML_BLOCK = re.compile(
    r"</?(p|div|li|ul|ol|dt|dd|dl|td|th|tr|h[1-6]|br|section|blockquote)\b[^>]*>", re.I
)


def from_html(text: str) -> Iterator[str]:
    """HTML: code elements become the marker (their sentence is dropped), block
    elements end a paragraph, other tags go, entities are decoded."""
    text = _HTML_CODE.sub(MARK, _HTML_DROP.sub("\n\n", text))
    text = _HTML_BLOCK.sub("\n\n", text)
    text = re.sub(r"<[^>]*>", "", text)
    yield from paragraphs(html.unescape(text), skip_indented=False)


def from_rst(text: str) -> Iterator[str]:
    """reStructuredText / AsciiDoc: literal blocks (indented) and directives dropped,
    title underlines dropped, inline literals and roles become the marker, emphasis kept."""
    text = re.sub(r"^[=\-~^\"'`#*+.:]{3,}\s*$", "", text, flags=re.M)
    for para in paragraphs(text):
        if para.startswith((".. ", "..\n", "|", "+", "[", "//", "----", "....")):
            continue
        para = re.sub(r"``.+?``|:\w+(:\w+)*:`[^`]*`|`[^`]*`_*", MARK, para, flags=re.S)
        para = re.sub(r"\*\*?([^*\n]+)\*\*?", r"\1", para)
        para = re.sub(r"^\s*([-*]|\d+\.|#\.)\s+", "", para)
        yield para


def from_pod(text: str) -> Iterator[str]:
    """POD: command paragraphs (`=head1` ...) and verbatim (indented) ones dropped;
    B<>/I<>/S<> keep their text, code-like codes (C<>, F<>, L<>, E<>, X<>, Z<>) the marker."""
    for para in paragraphs(text):
        if para.startswith("="):
            continue
        para = re.sub(r"[CFLEXZ]<<+\s.*?\s>>+", MARK, para, flags=re.S)
        prev = None
        while prev != para:
            prev = para
            para = re.sub(r"[BIS]<([^<>]*)>", r"\1", para)
            para = re.sub(r"[CFLEXZ]<[^<>]*>", MARK, para)
        yield para


def from_roff(text: str) -> Iterator[str]:
    """man(7) roff: paragraph macros end a paragraph, `.nf`/`.EX` blocks are dropped,
    font-change macro lines (.B, .I, .BR ...: names and options) become the marker,
    inline font escapes keep their text, other escapes the marker."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith((".nf", ".EX")):
            skipping = True
        if line.startswith((".fi", ".EE")):
            skipping = False
            out.append("")
            continue
        if skipping or line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith((".", "'")):
            macro = line[1:].split(" ", 1)[0]
            out.append(MARK if macro in _ROFF_FONT else "")
            continue
        line = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", line).replace("\\-", "-").replace("\\&", "")
        out.append(re.sub(r"\\(\(..|\[[^\]]*\]|.)", MARK, line))
    yield from paragraphs("\n".join(out), skip_indented=False)


_ROFF_FONT = {"B", "I", "BR", "BI", "IB", "IR", "RB", "RI", "SM", "SB", "UR", "MT"}


def from_dictd(text: str) -> Iterator[str]:
    """A dictd database's text: each definition's paragraph with its sense number,
    source tags (`[1913 Webster]`) and quotation attributions (`--Shak.`) removed."""
    text = re.sub(r"\[1913 Webster\]|\[PJC\]|\[WordNet \d\.\d\]", "", text)
    for para in re.split(r"\n\s*\n", text):
        para = re.sub(r"--\s?[A-Z][\w. ]*$", "", para.strip())
        para = re.sub(r"^(\d+\.|\([a-z]\))\s+", "", para)
        if para:
            yield para


def from_fortune(text: str) -> Iterator[str]:
    """A fortune file: `%`-separated quotes, attribution lines (`-- Name`) dropped."""
    for quote in text.split("\n%\n"):
        lines = [ln for ln in quote.splitlines() if not ln.strip().startswith("--")]
        yield "\n".join(lines)


def from_info(text: str) -> Iterator[str]:
    """GNU Info: node headers and menus dropped, indented examples dropped."""
    text = text.replace("\x1f", "\n\n")
    for para in paragraphs(text):
        if para.startswith(("File: ", "* Menu:", "*Note")):
            continue
        yield para


def from_c_comments(text: str) -> Iterator[str]:
    """C block comments: each comment's text without its leading `*`s, in paragraphs;
    an indented paragraph inside a comment (an example) is dropped."""
    for m in re.finditer(r"/\*+(.*?)\*/", text, re.S):
        body = re.sub(r"^[ \t]*\*+ ?", "", m.group(1), flags=re.M)
        if "<" in body or "{@" in body:  # Javadoc: inline code the marker, tags go
            body = re.sub(r"\{@\w+[^}]*\}", MARK, _HTML_CODE.sub(MARK, body))
            body = re.sub(
                r"</?(p|ul|ol|li|dl|dt|dd|br|blockquote|table|tr|td)\b[^>]*>", "\n\n", body
            )
            body = html.unescape(re.sub(r"</?(i|b|em|strong)>", "", body))
        first, _, rest = body.strip("\n").partition("\n")  # GNU style: text after /*
        yield from paragraphs(first.strip() + "\n" + textwrap.dedent(rest))


def from_kconfig(text: str) -> Iterator[str]:
    """Kconfig: the text of each `help` block (the lines indented under it)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() not in ("help", "---help---"):
            continue
        block: list[str] = []
        for ln in lines[i + 1 :]:
            if ln.strip() and not ln.startswith(("\t", " ")):
                break
            block.append(ln.strip())
        yield from paragraphs("\n".join(block), skip_indented=False)


# --- sources: which package's files, read how ------------------------------------------


@dataclass(frozen=True)
class Source:
    """One corpus source: the package that ships it, its files, how to read them."""

    name: str
    package: str
    patterns: tuple[str, ...]
    extract: Callable[[str], Iterable[str]]
    gzipped: bool = False
    members: tuple[str, str] | None = None
    """In a tarball: (a directory name in the member's path, or "", its suffixes)."""


def _html(name: str, package: str, *patterns: str) -> Source:
    return Source(name, package, patterns, from_html)


_LINUX = ("/usr/src/linux-source-*.tar.xz",)
_RUST_BOOKS = ("book", "reference", "nomicon", "rustc", "cargo", "edition-guide", "rust-by-example")
SOURCES: tuple[Source, ...] = (
    Source("gcide", "dict-gcide", ("/usr/share/dictd/gcide.dict.dz",), from_dictd, True),
    Source("wordnet", "dict-wn", ("/usr/share/dictd/wn.dict.dz",), from_dictd, True),
    Source("foldoc", "dict-foldoc", ("/usr/share/dictd/foldoc.dict.dz",), from_dictd, True),
    Source("jargon", "dict-jargon", ("/usr/share/dictd/jargon.dict.dz",), from_dictd, True),
    Source("vera", "dict-vera", ("/usr/share/dictd/vera.dict.dz",), from_dictd, True),
    Source("devil", "dict-devil", ("/usr/share/dictd/devil.dict.dz",), from_dictd, True),
    Source(
        "linux-docs", "linux-source", _LINUX, from_rst, members=("/Documentation/", ".rst .txt")
    ),
    Source("linux-kconfig", "linux-source", _LINUX, from_kconfig, members=("", "/Kconfig")),
    Source("linux-comments", "linux-source", _LINUX, from_c_comments, members=("", ".c .h")),
    Source(
        "python-docs",
        "python3.11-doc",
        ("/usr/share/doc/python3.11/html/_sources/**/*.txt",),
        from_rst,
    ),
    Source("perl-docs", "perl-doc", ("/usr/share/perl/5.*/pod/*.pod",), from_pod),
    _html("postgresql-docs", "postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html/*.html"),
    Source("git-docs", "git-doc", ("/usr/share/doc/git-doc/**/*.txt",), from_rst),
    Source("manpages", "manpages", ("/usr/share/man/man[4-7]/*.gz",), from_roff, True),
    Source("manpages-dev", "manpages-dev", ("/usr/share/man/man[23]/*.[23].gz",), from_roff, True),
    _html("debian-reference", "debian-reference-en", "/usr/share/debian-reference/*.en.html"),
    _html("debian-handbook", "debian-handbook", "/usr/share/doc/debian-handbook/html/en-US/*.html"),
    Source("gnu-standards", "gnu-standards", ("/usr/share/info/standards.info*",), from_info, True),
    Source("fortunes", "fortunes", ("/usr/share/games/fortunes/*.u8",), from_fortune),
    Source(
        "openjdk-comments",
        "openjdk-17-source",
        ("/usr/lib/jvm/openjdk-17/lib/src.zip",),
        from_c_comments,
        members=("", ".java"),
    ),
    Source(
        "gcc-comments",
        "gcc-12-source",
        ("/usr/src/gcc-12/gcc-*.tar.xz",),
        from_c_comments,
        members=("", ".c .cc .h"),
    ),
    Source(
        "glibc-comments",
        "glibc-source",
        ("/usr/src/glibc/glibc-*.tar.xz",),
        from_c_comments,
        members=("", ".c .h"),
    ),
    Source(
        "binutils-comments",
        "binutils-source",
        ("/usr/src/binutils/binutils-*.tar.xz",),
        from_c_comments,
        members=("", ".c .h"),
    ),
    Source(
        "gdb-comments",
        "gdb-source",
        ("/usr/src/gdb.tar.xz",),
        from_c_comments,
        members=("", ".c .h .cc"),
    ),
    _html("erlang-docs", "erlang-doc", "/usr/share/doc/erlang-doc/**/*.html"),
    _html("racket-docs", "racket-doc", "/usr/share/doc/racket/**/*.html"),
    _html("qt5-docs", "qtbase5-doc-html", "/usr/share/qt5/doc/**/*.html"),
    _html("openjdk-docs", "openjdk-17-doc", "/usr/share/doc/openjdk-17-jre-headless/api/**/*.html"),
    _html("django-docs", "python-django-doc", "/usr/share/doc/python-django-doc/html/**/*.html"),
    _html(
        "rust-docs",
        "rust-doc",
        *(f"/usr/share/doc/rust-doc/html/{b}/**/*.html" for b in _RUST_BOOKS),
        "/usr/share/doc/rust-doc/html/std/**/*.html",
    ),
    _html("nodejs-docs", "nodejs-doc", "/usr/share/doc/nodejs/api/*.html"),
    _html("apache-docs", "apache2-doc", "/usr/share/doc/apache2-doc/manual/en/**/*.html"),
    _html("debian-policy", "debian-policy", "/usr/share/doc/debian-policy/policy.html/*.html"),
    _html(
        "developers-reference",
        "developers-reference",
        "/usr/share/developers-reference/*.html",
        "/usr/share/doc/developers-reference/**/*.html",
    ),
    _html(
        "r-docs", "r-doc-html", "/usr/share/R/doc/**/*.html", "/usr/share/doc/r-doc-html/**/*.html"
    ),
    _html("exim-docs", "exim4-doc-html", "/usr/share/doc/exim4-doc-html/**/*.html"),
    _html(
        "libreoffice-help", "libreoffice-help-en-us", "/usr/share/libreoffice/help/en-US/**/*.html"
    ),
)


def source_files(src: Source) -> list[str]:
    """The files a source reads, sorted (a pattern matching nothing is reported by `build`)."""
    found: set[str] = set()
    for pat in src.patterns:
        found.update(p for p in glob.glob(pat, recursive=True) if os.path.isfile(p))
    return sorted(found)


def _texts(src: Source, path: str) -> Iterator[str]:
    """The decoded texts of one file (a tarball: its members `src.members` names)."""
    if src.members is not None and path.endswith(".zip"):
        under, suffixes = src.members[0], tuple(src.members[1].split())
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if under in name and name.endswith(suffixes):
                    yield zf.read(name).decode("utf-8", "replace")
        return
    if src.members is not None:
        under, suffixes = src.members[0], tuple(src.members[1].split())
        with tarfile.open(path, "r:*") as tf:
            for m in tf:
                if under in m.name and m.isfile() and m.name.endswith(suffixes):
                    f = tf.extractfile(m)
                    if f is not None:
                        yield f.read().decode("utf-8", "replace")
        return
    if src.gzipped and path.endswith(("gz", "dz")):
        with gzip.open(path) as g:
            data = g.read()
    else:
        data = Path(path).read_bytes()
    yield data.decode("utf-8", "replace")


def source_sentences(src: Source) -> Iterator[str]:
    """Every prose sentence of a source, in file order (repeats included)."""
    for path in source_files(src):
        for text in _texts(src, path):
            for para in src.extract(text):
                yield from sentences(para)


def _dpkg(field: str, package: str) -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", f"-f=${{{field}}}", package], capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 else ""


def licences(package: str) -> list[str]:
    """The distinct `License:` lines of a package's Debian copyright file (or its
    first lines when it has none), as the manifest's record of the terms."""
    path = Path(f"/usr/share/doc/{package}/copyright")
    if not path.exists():
        return []
    text = path.read_text("utf-8", "replace")
    found = sorted(
        {ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("License:")}
    )
    return found or [" ".join(text.split()[:40])]


def install(packages: list[str]) -> None:
    """apt-get install the packages (loud: a failed install names them)."""
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(cmd, env=env).returncode != 0:
        raise ConfigError(
            f"apt-get install failed for {' '.join(packages)} (root and apt-get update?)"
        )


def build(
    out: Path, sources: tuple[Source, ...] = SOURCES, log: Callable[[str], None] = print
) -> dict:
    """Write the corpus file and its manifest; return the manifest. A source whose
    files are missing fails loudly (install its package, or drop it from `sources`)."""
    seen: set[str] = set()
    pool: list[str] = []
    per_source: dict[str, dict] = {}
    for src in sources:  # every source's files checked before any is read
        if not source_files(src):
            raise ConfigError(
                f"source {src.name}: no file matches {src.patterns} (package {src.package})"
            )
    for src in sources:
        files = source_files(src)
        found = kept = 0
        for s in source_sentences(src):
            found += 1
            if s not in seen:
                seen.add(s)
                pool.append(s)
                kept += 1
        per_source[src.name] = {
            "package": src.package,
            "version": _dpkg("Version", src.package),
            "licences": licences(src.package),
            "files": len(files),
            "prose_sentences": found,
            "kept_distinct": kept,
        }
        log(f"{src.name:22s} {len(files):6,} files {found:9,} prose sentences {kept:9,} new")
    random.Random(0).shuffle(pool)
    out.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(s + "\n" for s in pool).encode("utf-8")
    out.write_bytes(body)
    sha = hashlib.sha256(body).hexdigest()
    manifest = {
        "file": str(out),
        "sentences": len(pool),
        "sha256": sha,
        "order": "distinct sentences (first source wins), shuffled with random.Random(0)",
        "rule": (__doc__ or "").split("The prose rule", 1)[1].strip(),
        "sources": per_source,
    }
    Path(f"{out}.manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    log(f"{len(pool):,} distinct sentences -> {out} (sha256 {sha[:16]}...)")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="memkit bench corpus", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"the corpus file (default {DEFAULT_OUT})")
    ap.add_argument(
        "--no-install", action="store_true", help="use the packages already installed (no apt-get)"
    )
    ap.add_argument(
        "--only", default=None, help="comma-separated source names to read (default: all)"
    )
    args = ap.parse_args(argv)
    sources = SOURCES
    if args.only is not None:
        names = {s.name for s in SOURCES}
        want = [x.strip() for x in args.only.split(",") if x.strip()]
        bad = [x for x in want if x not in names]
        if bad or not want:
            ap.error(f"--only {args.only!r}: unknown {bad}; sources are {', '.join(sorted(names))}")
        sources = tuple(s for s in SOURCES if s.name in want)
    if not args.no_install:
        install(sorted({s.package for s in sources}))
    build(Path(os.path.expanduser(args.out)), sources)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
