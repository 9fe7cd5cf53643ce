"""The recalled block (SPEC §5): paraphrase dedup first, clamp second, exact account."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.assemble import (
    CAVEAT,
    HEADING,
    AssembledBlock,
    BlockAccount,
    assemble_block,
    block_for_run,
)
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, RecallParams
from memkit.text import TRUNCATED_MARKER, byte_len
from memkit.types import Memory, Recalled

PREAMBLE = f"{HEADING}\n{CAVEAT}\n"


def rec(i: int | str, content: str, kind: str = "fact", scope: str = "s") -> Recalled:
    mid = f"m{i}" if isinstance(i, int) else i
    return Recalled(Memory(mid, scope, kind, content), "vector", 0.5)


def distinct_fact(i: int, size: int) -> str:
    """A fact of exactly `size` ASCII bytes sharing no word with other indices."""
    text = " ".join(f"w{i}x{j}" for j in range(size // 4 + 1))[:size]
    return text.rstrip().ljust(size, "z")


def assert_account_consistent(block: AssembledBlock) -> None:
    a = block.account
    removed = [r for r, _ in a.removed_as_paraphrase]
    assert sorted(removed + list(a.admitted) + list(a.stopped_by_budget)) == sorted(a.recalled)
    assert set(a.truncated) <= set(a.admitted)
    assert a.bytes_spent == sum(a.admitted_bytes) == sum(e.bytes for e in block.entries)
    assert a.admitted == tuple(e.id for e in block.entries)
    assert a.block_bytes == byte_len(block.text)
    assert BlockAccount.from_dict(json.loads(json.dumps(a.to_dict()))) == a


# --- paraphrase dedup --------------------------------------------------------


def test_paraphrases_collapse_and_the_distinct_preference_survives():
    block = assemble_block(
        [
            rec(1, "The homepage is the top page by traffic."),
            rec(2, "By traffic, the homepage is the top page."),
            rec(3, "Our top page by traffic is the homepage"),
            rec(4, "User prefers answers in Vietnamese", kind="preference"),
        ]
    )
    a = block.account
    assert "m4" in a.admitted
    assert len(a.removed_as_paraphrase) >= 1
    assert len(a.admitted) >= 2
    assert a.admitted[0] == "m1"  # the first, most relevant phrasing survives
    assert ("m2", "m1") in a.removed_as_paraphrase
    assert_account_consistent(block)


def test_accented_and_unaccented_vietnamese_collapse_to_one():
    block = assemble_block(
        [
            rec(1, "Trang chủ là trang có lưu lượng truy cập cao nhất"),
            rec(2, "Trang chu la trang co luu luong truy cap cao nhat"),
            rec(3, "Địa chỉ đăng nhập là cổng nội bộ"),
            rec(4, "dia chi dang nhap la cong noi bo"),
        ]
    )
    assert block.account.admitted == ("m1", "m3")
    assert block.account.removed_as_paraphrase == (("m2", "m1"), ("m4", "m3"))


def test_three_distinct_facts_sharing_words_all_stay():
    facts = [
        "The staging database runs on port 5432",
        "The production database runs on host db1",
        "The staging cache runs on port 6379",
    ]
    block = assemble_block([rec(i, f) for i, f in enumerate(facts)])
    assert block.account.admitted == ("m0", "m1", "m2")
    assert block.account.removed_as_paraphrase == ()


def test_later_superset_of_a_short_kept_memory_is_removed():
    block = assemble_block(
        [rec(1, "Use pnpm."), rec(2, "Always use pnpm, never npm, in the web repository.")]
    )
    assert block.account.admitted == ("m1",)
    assert block.account.removed_as_paraphrase == (("m2", "m1"),)


def test_dedup_threshold_bound_is_inclusive():
    kept = "alpha bravo charlie delta echo"
    at_bound = "alpha bravo charlie delta foxtrot golf"  # 4 / min(5, 6) = 0.80
    below = "alpha bravo charlie hotel india"  # 3 / 5 = 0.60
    block = assemble_block([rec(1, kept), rec(2, at_bound), rec(3, below)])
    assert block.account.removed_as_paraphrase == (("m2", "m1"),)
    assert "m3" in block.account.admitted
    # 3 of 4 shared = 0.75, one step under the bound: kept
    block = assemble_block(
        [rec(1, "alpha bravo charlie delta"), rec(2, "alpha bravo charlie zulu")]
    )
    assert block.account.admitted == ("m1", "m2")
    # the threshold is a tunable: 0.75 now removes it
    block = assemble_block(
        [rec(1, "alpha bravo charlie delta"), rec(2, "alpha bravo charlie zulu")],
        AssemblyParams(dedup_threshold=0.75),
    )
    assert block.account.removed_as_paraphrase == (("m2", "m1"),)


def test_paraphrase_of_a_removed_entry_is_judged_against_kept_ones_only():
    block = assemble_block(
        [rec(1, "a1 a2 a3 a4 a5"), rec(2, "a1 a2 a3 a4 b1 b2 b3 b4"), rec(3, "b1 b2 b3 b4 c1")]
    )
    # m2 goes as a paraphrase of m1; m3 overlaps only m2 (removed), so it stays
    assert block.account.admitted == ("m1", "m3")


def test_entries_with_an_empty_word_set_are_always_kept():
    block = assemble_block([rec(1, "!!! ---"), rec(2, "!!! ---"), rec(3, "   ")])
    assert block.account.admitted == ("m1", "m2", "m3")


# The assembler's tokenizer (dedup_words) is pinned to SPEC §5.2 in test_text.py,
# beside memkit.text.word_set and the per-character definition.


# --- clamp -------------------------------------------------------------------


def test_a_long_memory_is_cut_with_the_marker():
    block = assemble_block([rec(1, distinct_fact(1, 1800))])
    (entry,) = block.entries
    assert entry.truncated and entry.text.endswith(TRUNCATED_MARKER)
    assert entry.bytes == byte_len(entry.text) == 600
    assert block.account.truncated == ("m1",)
    assert block.account.bytes_recalled == 1800
    assert block.account.bytes_truncated == 1800 - 585  # 585 content bytes kept + marker


def test_entry_bound_600_kept_601_cut_and_whitespace_stripped_first():
    at = distinct_fact(1, 600)
    past = distinct_fact(2, 601)
    block = assemble_block([rec(1, f"  \n{at}\t "), rec(2, past)])
    e1, e2 = block.entries
    assert e1.text == at and not e1.truncated
    assert e2.truncated and e2.bytes == 600
    assert block.account.truncated == ("m2",)
    assert block.account.bytes_recalled == 1201
    assert block.account.bytes_truncated == 601 - 585


def test_entry_cut_falls_on_a_code_point_boundary():
    block = assemble_block([rec(1, "😀" * 300)])  # 1200 bytes of 4-byte characters
    (entry,) = block.entries
    assert entry.text == "😀" * 146 + TRUNCATED_MARKER  # 584 bytes back to 584 = 146*4
    assert entry.bytes <= 600


def test_forty_distinct_facts_some_but_not_all_admitted():
    block = assemble_block([rec(i, distinct_fact(i, 315)) for i in range(40)])
    a = block.account
    assert a.removed_as_paraphrase == ()
    assert len(a.admitted) == 6000 // 315 == 19
    assert a.stopped_by_budget == tuple(f"m{i}" for i in range(19, 40))
    assert a.bytes_spent == 19 * 315 <= 6000
    assert_account_consistent(block)


def test_block_budget_bound_6000_admitted_6001_stopped():
    ten = [rec(i, distinct_fact(i, 600)) for i in range(10)]
    block = assemble_block([*ten, rec(99, "z")])
    assert block.account.bytes_spent == 6000
    assert len(block.account.admitted) == 10
    assert block.account.stopped_by_budget == ("m99",)


def test_stop_ends_admission_and_skip_packs_later_entries_that_fit():
    sizes = [600] * 9 + [590, 20, 10]  # 5400, 5990, 6010 overflows, 6000 fits
    items = [rec(i, distinct_fact(i, n)) for i, n in enumerate(sizes)]
    stop = assemble_block(items)
    assert stop.account.admitted == tuple(f"m{i}" for i in range(10))
    assert stop.account.stopped_by_budget == ("m10", "m11")
    assert stop.account.bytes_spent == 5990
    skip = assemble_block(items, AssemblyParams(overflow="skip"))
    assert skip.account.admitted == (*(f"m{i}" for i in range(10)), "m11")
    assert skip.account.stopped_by_budget == ("m10",)
    assert skip.account.bytes_spent == 6000
    assert skip.account.overflow == "skip"
    assert_account_consistent(stop)
    assert_account_consistent(skip)


def test_clamp_runs_after_dedup():
    long = "The release checklist lives in docs/release.md and must be followed. " * 15
    items = [rec(i, f"Note: {long}") for i in range(30)]
    items.append(rec("distinct", "The on-call rotation changes every Monday at 09:00 UTC"))
    block = assemble_block(items)
    assert "id distinct) The on-call rotation" in block.text
    assert len(block.account.removed_as_paraphrase) == 29
    # without dedup the copies alone would exhaust the budget
    no_dedup = assemble_block(items, AssemblyParams(dedup_threshold=1.01))
    assert "distinct" in no_dedup.account.stopped_by_budget
    assert "on-call" not in no_dedup.text


# --- rendering -----------------------------------------------------------------


def test_render_heading_caveat_bullets_and_trailing_blank_line():
    block = assemble_block(
        [rec("a1", "Deploys go through `make deploy`.", kind="procedure"), rec("", "No id here")]
    )
    assert block.text == (
        PREAMBLE
        + "- (procedure, id a1) Deploys go through `make deploy`.\n"
        + "- (fact) No id here\n"
        + "\n"
    )
    assert "prior runs" in CAVEAT and "instructions" in CAVEAT and "permission" in CAVEAT


def test_no_block_at_all_when_nothing_is_recalled():
    block = assemble_block([])
    assert block.text == "" and block.entries == ()
    assert block.account.recalled == () and block.account.block_bytes == 0


def test_plain_memory_objects_are_accepted():
    block = assemble_block([Memory("x", "s", "preference", "Prefers tabs")])
    assert "- (preference, id x) Prefers tabs\n" in block.text


def test_heading_and_caveat_stay_when_the_budget_admits_nothing():
    block = assemble_block([rec(1, "x" * 100)], AssemblyParams(block_bytes=50))
    assert block.text == PREAMBLE + "\n"
    assert block.account.stopped_by_budget == ("m1",)


@pytest.mark.parametrize(
    "params, needle",
    [
        (AssemblyParams(entry_bytes=15), "entry_bytes=15"),
        (AssemblyParams(block_bytes=0), "block_bytes=0"),
        (AssemblyParams(overflow="drop"), "overflow='drop'"),  # type: ignore[arg-type]
        (AssemblyParams(dedup_threshold=0.0), "dedup_threshold=0.0"),
        (AssemblyParams(limit=0), "limit=0"),
    ],
)
def test_bad_params_are_config_errors_naming_the_value(params, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        assemble_block([rec(1, "x")], params)


def test_smallest_valid_entry_cap_and_no_cap():
    block = assemble_block([rec(1, "x" * 40)], AssemblyParams(entry_bytes=16))
    assert block.entries[0].text == "x" + TRUNCATED_MARKER
    block = assemble_block([rec(1, "x" * 4000)], AssemblyParams(entry_bytes=0, block_bytes=5000))
    assert block.entries[0].bytes == 4000 and not block.entries[0].truncated


# --- property: byte guarantees on arbitrary Unicode ---------------------------

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=120)
_content = st.builds(lambda s, k: s * k, _text, st.integers(1, 12))


@settings(max_examples=150, deadline=None)
@given(st.lists(_content, max_size=30), st.sampled_from(["stop", "skip"]))
def test_byte_guarantees_hold_for_arbitrary_unicode(contents, overflow):
    block = assemble_block(
        [rec(i, c) for i, c in enumerate(contents)], AssemblyParams(overflow=overflow)
    )
    raw = block.text.encode("utf-8")  # valid UTF-8: encodes and round-trips
    assert raw.decode("utf-8") == block.text
    for e in block.entries:
        assert byte_len(e.text) == e.bytes <= 600
    assert block.account.bytes_spent <= 6000
    if contents:
        assert block.text.startswith(PREAMBLE) and block.text.endswith("\n\n")
    else:
        assert block.text == ""
    assert_account_consistent(block)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="𝔸😀ĐđÅé a", min_size=150, max_size=400), max_size=25))
def test_four_byte_heavy_entries_respect_both_limits(contents):
    block = assemble_block([rec(i, c) for i, c in enumerate(contents)])
    assert all(e.bytes <= 600 for e in block.entries)
    assert block.account.bytes_spent <= 6000
    assert_account_consistent(block)


# --- block_for_run ------------------------------------------------------------


class RecallStub:
    def __init__(self, hits=(), exc: Exception | None = None):
        self.hits, self.exc, self.calls = list(hits), exc, []

    def recall(self, scope_id, query, limit=8, params=RecallParams()):
        self.calls.append((scope_id, query, limit, params))
        if self.exc:
            raise self.exc
        return self.hits


def test_block_for_run_recalls_once_with_the_task_and_limit_8():
    store = RecallStub([rec(1, "Deploy with make deploy"), rec(2, "Foreign", scope="other")])
    rp = RecallParams(floor=0.3)
    block = block_for_run(store, "s", "how do I deploy?", recall_params=rp)
    assert store.calls == [("s", "how do I deploy?", 8, rp)]
    assert block.account.admitted == ("m1",)  # the foreign row never reaches the prompt
    assert "Foreign" not in block.text


def test_block_for_run_store_error_gives_an_empty_block_not_an_exception():
    block = block_for_run(RecallStub(exc=RuntimeError("disk I/O error")), "s", "task")
    assert block.text == ""
    assert block.account.error == "RuntimeError: disk I/O error"


def test_block_for_run_nothing_recalled_no_block():
    assert block_for_run(RecallStub([]), "s", "task").text == ""


# --- the bench --------------------------------------------------------------------


def test_bench_assemble_smoke_and_baseline_agrees(tmp_path, capsys):
    from evals import bench_assemble

    for lst in bench_assemble.make_lists(20, 10):
        block = assemble_block(lst)
        assert bench_assemble.naive_assemble(lst) == (block.text, block.account.admitted)
    out = tmp_path / "bench.json"
    assert (
        bench_assemble.main(["--repeat", "1", "--lists", "6", "--quiet", "--json", str(out)]) == 0
    )
    res = json.loads(out.read_text())
    assert set(res["sizes"]) == {"8", "20"}
    assert res["sizes"]["8"]["assemble"]["median_us"] > 0
    assert "per block of 8" in capsys.readouterr().out


_vocab = st.sampled_from(
    ["deploy", "Deploy", "dépl0y", "the", "staging", "đường", "duong", "ĐƯỜNG", "cache", "😀", "x"]
)
_sentence = st.lists(_vocab, max_size=8).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_sentence, _content), max_size=25))
def test_matches_a_literal_transcription_of_the_spec(contents):
    """Differential check against SPEC §5 written out naively with memkit.text
    (word sets recomputed per pair): same bullets, same admitted ids."""
    from evals.bench_assemble import naive_assemble

    items = [rec(i, c) for i, c in enumerate(contents)]
    block = assemble_block(items)
    text, admitted = naive_assemble(items)
    assert block.account.admitted == admitted
    assert block.text == (text if items else "")


def test_non_ascii_whitespace_counts_in_word_sets_before_the_clamp_strips_it():
    """U+0085 is stripped by the clamp but is a token for dedup: a second copy is a
    paraphrase of the first (found by the differential property test)."""
    block = assemble_block([rec(0, "\x85"), rec(1, "\x85")])
    assert block.account.admitted == ("m0",)
    assert block.account.removed_as_paraphrase == (("m1", "m0"),)
