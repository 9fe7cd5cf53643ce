"""Rollout consolidation (SPEC §7): staging, shaping, parsing, validation, passes."""
