"""What a user gets with no arguments: the default store recalls the user's name.

The case issue #31 started from: a memory test suite nobody here wrote asks
"What is the user's name?" after the user said "It's Marcus Chen, ...". The
words share nothing (no keyword fallback), so the vector path must clear the
default embedder's default floor (`memkit eval calibrate floor`)."""

from __future__ import annotations

from memkit import RecallParams, assemble_block
from memkit.embed import default_floor_of, get_embedder
from memkit.store import open_store

NAME = "It's Marcus Chen, I'm a nurse in Denver"
QUESTION = "What is the user's name?"


def test_the_users_name_is_recalled_at_the_default_configuration():
    with open_store(":memory:") as store:
        store.remember("u", NAME)
        store.remember("u", "The user prefers tea over coffee in the morning")
        store.remember("u", "Deployments run through ops/deploy.sh on Fridays")
        hits = store.recall("u", QUESTION, params=RecallParams())
        assert [h.path for h in hits if h.content == NAME] == ["vector"]
        assert NAME in assemble_block(hits).text
        # the floor it cleared is the default embedder's calibrated one, not the SPEC's 0.25
        assert default_floor_of(store.embedder) == default_floor_of(get_embedder("wordllama"))
        assert default_floor_of(store.embedder) < 0.25
