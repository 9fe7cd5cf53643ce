"""memkit.checks: every validator refuses the wrong type or value with a
ConfigError naming the argument, and returns a good value unchanged."""

from __future__ import annotations

import math

import pytest

from memkit import checks
from memkit.errors import ConfigError, MemkitError

SURROGATE = "x \ud800"


@pytest.mark.parametrize(
    "fn, value",
    [
        (checks.check_scope, 5),
        (checks.check_scope, None),
        (checks.check_scope, b"scope"),
        (checks.check_scope, ""),
        (checks.check_scope, "   "),
        (checks.check_scope, SURROGATE),
        (checks.check_id, {}),
        (checks.check_id, "\udfff"),
        (checks.check_optional_id, {}),
        (checks.check_optional_id, ""),
        (checks.check_content, 7),
        (checks.check_content, " \n"),
        (checks.check_content, "a" * (checks.MAX_CONTENT_BYTES + 1)),
        (checks.check_content, "é" * (checks.MAX_CONTENT_BYTES // 2) + "a"),
        (checks.check_query, 5),
        (checks.check_query, None),
        (checks.check_query, SURROGATE),
        (checks.check_tags, "ops"),
        (checks.check_tags, None),
        (checks.check_tags, [1, 2]),
        (checks.check_tags, ["ok", None]),
        (checks.check_tags, ["ok", SURROGATE]),
        (checks.check_tags, {"a": 1}),
        (checks.check_tags, {"a"}),
        (checks.check_optional_tags, "ops"),
        (checks.check_confidence, None),
        (checks.check_confidence, True),
        (checks.check_confidence, "0.5"),
        (checks.check_confidence, math.nan),
        (checks.check_confidence, -0.01),
        (checks.check_confidence, 1.01),
        (checks.check_kind, 0),
        (checks.check_kind, False),
        (checks.check_kind, "facts"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(fn, value):
    with pytest.raises(ConfigError) as e:
        fn(value, "the_arg")
    assert isinstance(e.value, MemkitError) and isinstance(e.value, ValueError)
    assert "the_arg" in str(e.value)


@pytest.mark.parametrize("value", [None, "5", 5.0, True, 10**30, -(10**30), 2**31, -(2**31) - 1])
def test_int_limits_are_not_coerced(value):
    with pytest.raises(ConfigError, match="limit"):
        checks.check_int(value, "limit")


def test_int_bounds_are_inclusive():
    assert checks.check_int(checks.LIMIT_MAX, "limit") == checks.LIMIT_MAX
    assert checks.check_int(checks.LIMIT_MIN, "limit") == checks.LIMIT_MIN
    assert checks.check_int(0, "limit", lo=0, hi=0) == 0
    with pytest.raises(ConfigError):
        checks.check_int(1, "limit", lo=0, hi=0)


def test_content_bound_is_bytes_at_the_bound_and_one_past():
    at = "é" * (checks.MAX_CONTENT_BYTES // 2)
    assert checks.check_content(at) is at
    with pytest.raises(ConfigError, match=f"{checks.MAX_CONTENT_BYTES + 1} bytes"):
        checks.check_content(at + "a")


def test_good_values_come_back_unchanged():
    assert checks.check_scope("scope-a") == "scope-a"
    assert checks.check_tags(["a", ""]) == ("a", "")
    assert checks.check_tags(()) == ()
    assert checks.check_optional_tags(None) is None
    assert checks.check_optional_id(None) is None
    assert checks.check_query("") == ""
    assert checks.check_confidence(1) == 1 and checks.check_confidence(0.0) == 0.0
    assert checks.check_kind("learning") == "learning"


def test_messages_name_argument_and_value():
    with pytest.raises(ConfigError) as e:
        checks.check_scope(5)
    assert str(e.value) == "scope_id must be a string, not int, got 5"
    with pytest.raises(ConfigError) as e:
        checks.check_tags(["a", SURROGATE], "tags")
    assert "tags[1]" in str(e.value) and "lone surrogate" in str(e.value)


def test_utf8_problem_locates_the_surrogate():
    assert checks.utf8_problem("fine é") is None
    assert "index 2" in checks.utf8_problem(SURROGATE)
