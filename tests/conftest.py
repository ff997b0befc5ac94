"""Shared pytest fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def lm_pool():
    """The real local LM pool (2 llama.cpp servers, SmolLM2-135M), started once per session
    and always stopped. Tests using it are marked `lm`."""
    from pxn.runner.lm_pool import LMPool

    with LMPool(2) as info:
        yield info
