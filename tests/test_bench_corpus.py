"""`memkit bench corpus` (evals.bench_corpus) and the bench's `--texts file:` reader
(evals.bench_data.file_sentences): the prose rule at its bounds, each extractor
dropping code and keeping prose, the file and manifest a build writes, and the
reader's refusals. Tiny fixtures only: no package is installed here."""

from __future__ import annotations

import hashlib
import json

import pytest

from evals import bench_corpus as bc
from evals.bench_data import file_sentences
from memkit.errors import ConfigError

PROSE = "The quick brown fox jumps over the lazy dog."


def _of_len(n: int) -> str:
    """A prose sentence of exactly n characters (n >= 30)."""
    head = "The store keeps every memory it is given"
    s = (head + " and more" * 30)[: n - 1].rstrip()
    return s + "x" * (n - 1 - len(s)) + "."


def test_prose_length_bounds_are_30_and_200_characters():
    assert bc.is_prose(_of_len(30)) and bc.is_prose(_of_len(200))
    assert not bc.is_prose(_of_len(29)) and not bc.is_prose(_of_len(201))


@pytest.mark.parametrize(
    "text",
    [
        "the quick brown fox jumps over the lazy dog.",  # lower-case start
        "The quick brown fox jumps over the lazy dog",  # no end mark
        "Quick brown-fox-jumps-over-the-lazy-dog-again.",  # under 5 words
        "Call os.path.join to build the path of the file.",  # dotted name
        "Set the value with x = compute(y) before the loop.",  # '='
        "Use the flag_name option when the build runs slowly.",  # '_'
        "Returns the element at \x00 in this list of values.",  # inline code marker
        "See http://example.org/docs for the whole story here.",  # '/'
        "The value 1234567890 1234567890 is what it returns now.",  # few letters
    ],
)
def test_code_like_or_broken_sentences_are_not_prose(text):
    assert not bc.is_prose(text)


def test_prose_passes_and_closing_quote_may_follow_the_end_mark():
    assert bc.is_prose(PROSE) and bc.is_prose('He said it is "the end of the road."')


def test_sentences_split_a_paragraph_and_keep_only_prose():
    block = f"{PROSE}  Call f() now or later for good.\n  Is this a real question in the test?"
    assert list(bc.sentences(block)) == [PROSE, "Is this a real question in the test?"]


def test_html_drops_pre_and_inline_code_sentences_and_decodes_entities():
    page = (
        "<html><head><title>T</title></head><body><p>Fish &amp; chips are served "
        "on every Friday night.</p><pre>The code block is not prose at all.</pre>"
        "<p>Call <code>open</code> to begin the work here.</p></body></html>"
    )
    got = [s for p in bc.from_html(page) for s in bc.sentences(p)]
    assert got == ["Fish & chips are served on every Friday night."]


def test_rst_drops_literal_blocks_directives_and_inline_literals():
    doc = (
        "Title\n=====\n\n"
        f"{PROSE}\nIt spans two lines of the file.\n\n"
        "    The indented literal block sentence is code.\n\n"
        ".. note:: The directive sentence is not taken here.\n\n"
        "Use ``make all`` to build everything in the tree.\n"
    )
    got = [s for p in bc.from_rst(doc) for s in bc.sentences(p)]
    assert got == [PROSE, "It spans two lines of the file."]


def test_pod_keeps_emphasis_text_and_drops_code_and_commands():
    pod = (
        "=head1 The heading line is a command\n\n"
        "This is I<really> the prose of the manual page.\n\n"
        "Call C<print> to write the output to a file.\n\n"
        "    The verbatim paragraph is an example here.\n"
    )
    got = [s for p in bc.from_pod(pod) for s in bc.sentences(p)]
    assert got == ["This is really the prose of the manual page."]


def test_roff_keeps_font_escaped_words_and_drops_example_blocks():
    man = (
        '.\\" a comment line\n.TH X 1\n.SH NAME\n.PP\n'
        "The \\fBfirst\\fR paragraph of the manual is prose.\n.nf\n"
        "The no-fill block is an example of code.\n.fi\n.PP\n"
        "A paragraph naming\n.B ls\nis dropped as a whole one.\n"
    )
    got = [s for p in bc.from_roff(man) for s in bc.sentences(p)]
    assert got == ["The first paragraph of the manual is prose."]


def test_c_comments_of_kernel_gnu_and_javadoc_styles():
    src = (
        "/*\n * The kernel style comment is a sentence too.\n *\n"
        " *     indented_example(code);\n */\nint x; /* Not prose: short. */\n"
        "/* The GNU style comment starts on the first line\n   and goes on here.  */\n"
        "/**\n * Returns the {@code size} of the list of things.\n"
        " * <p>The javadoc paragraph is <i>plain</i> prose as well.\n */\n"
    )
    got = [s for p in bc.from_c_comments(src) for s in bc.sentences(p)]
    assert got == [
        "The kernel style comment is a sentence too.",
        "The GNU style comment starts on the first line and goes on here.",
        "The javadoc paragraph is plain prose as well.",
    ]


def test_kconfig_takes_the_help_blocks_only():
    kc = (
        'config FOO\n\tbool "Foo support"\n\thelp\n\t  Say Y here if you want '
        "the foo driver.\n\t  It is a good driver for your box.\n\nconfig BAR\n"
        '\tbool "The bar option is a prompt, not help."\n'
    )
    got = [s for p in bc.from_kconfig(kc) for s in bc.sentences(p)]
    assert got == ["Say Y here if you want the foo driver.", "It is a good driver for your box."]


def test_dictd_drops_sense_numbers_source_tags_and_attributions():
    d = (
        'Abuse \\A*buse"\\, v. t.\n   1. To use ill; to maltreat; to act injuriously '
        "to anyone.\n      [1913 Webster]\n\n            They abused the general "
        "in every way. --Macaulay.\n"
    )
    got = [s for p in bc.from_dictd(d) for s in bc.sentences(p)]
    assert got == [  # the headword's line is not prose; the definition and quote are
        "To use ill; to maltreat; to act injuriously to anyone.",
        "They abused the general in every way.",
    ]


def _source(tmp_path, texts: dict[str, str]) -> bc.Source:
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    return bc.Source("tiny", "no-such-package", (str(tmp_path / "*.rst"),), bc.from_rst)


def test_build_writes_distinct_shuffled_sentences_and_a_manifest(tmp_path):
    other = "A second sentence of prose is here."
    src = _source(tmp_path, {"a.rst": f"{PROSE}\n\n{other}\n", "b.rst": f"{PROSE}\n"})
    out = tmp_path / "out" / "corpus.txt"
    manifest = bc.build(out, (src,), log=lambda _m: None)
    lines = out.read_text().splitlines()
    assert sorted(lines) == sorted([PROSE, other])  # the repeat in b.rst dropped
    assert manifest["sentences"] == 2
    assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    on_disk = json.loads((tmp_path / "out" / "corpus.txt.manifest.json").read_text())
    assert on_disk["sources"]["tiny"] | {} == manifest["sources"]["tiny"]
    assert on_disk["sources"]["tiny"]["prose_sentences"] == 3
    assert on_disk["sources"]["tiny"]["kept_distinct"] == 2
    assert file_sentences(str(out)) == lines


def test_a_source_with_no_files_fails_naming_it(tmp_path):
    src = bc.Source("empty", "pkg-x", (str(tmp_path / "none" / "*.rst"),), bc.from_rst)
    with pytest.raises(ConfigError, match=r"source empty: no file matches.*pkg-x"):
        bc.build(tmp_path / "c.txt", (src,), log=lambda _m: None)


def test_unknown_source_names_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bc.main(["--only", "gcide,nope", "--no-install", "--out", "/nonexistent/x"])
    assert e.value.code == 2 and "nope" in capsys.readouterr().err


def test_file_sentences_reads_one_text_a_line(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("one text\nanother text\n")
    assert file_sentences(str(p)) == ["one text", "another text"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("one\n\ntwo\n", "line 2 is empty"),
        ("one\ntwo\none\n", "line 3 repeats line 1"),
        ("", "holds no text"),
    ],
)
def test_file_sentences_refuses_empty_lines_repeats_and_empty_files(tmp_path, body, says):
    p = tmp_path / "c.txt"
    p.write_text(body)
    with pytest.raises(ConfigError, match=says):
        file_sentences(str(p))


def test_file_sentences_names_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"file:.*missing\.txt: cannot read it"):
        file_sentences(str(tmp_path / "missing.txt"))
