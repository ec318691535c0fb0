"""The workspace's shared test data (metrics captures, traces): ``<checkout>/../shared``.

``shared("fixtures", "metrics")`` is the path of that part, or the test FAILS saying what
is missing, where it was looked for and how to provide it. Never a skip: a checkout
without the data would otherwise pass ``make test`` having tested nothing. Set
``$SYSHAX_SHARED`` to use a copy that lives elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "SYSHAX_SHARED"
CHECKOUT = Path(__file__).resolve().parents[1]


def shared_root() -> Path:
    """``$SYSHAX_SHARED`` when set, else ``shared`` beside the checkout."""
    configured = os.environ.get(ENV)
    return Path(configured) if configured else CHECKOUT.parent / "shared"


def shared(*parts: str) -> Path:
    """The path of ``parts`` under the shared directory; fails the test when it is missing."""
    root = shared_root()
    path = root.joinpath(*parts)
    if not path.exists():
        where = f"${ENV} is {root}" if os.environ.get(ENV) else f"${ENV} is not set, so beside the checkout: {root}"
        pytest.fail(
            f"shared test data missing: {path} does not exist ({where}). Put the workspace's shared/ "
            f"directory (fixtures/, traces/, ...) at {CHECKOUT.parent / 'shared'}, or set ${ENV} to "
            "a copy of it.",
            pytrace=False,
        )
    return path
