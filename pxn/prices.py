"""Dollars per million tokens for a named model, from litellm's own price table.

litellm ships its table inside the package; LITELLM_LOCAL_MODEL_COST_MAP=True
makes it read that copy instead of fetching the newest over the network, so a
lookup works offline and gives the same answer on every machine with the same
pinned litellm. litellm takes seconds to import: it is imported only when a
scenario names a model without giving its prices.
"""

from __future__ import annotations

import difflib
import os
from functools import cache

from pxn.errors import PxnError

PER_MILLION = 1_000_000


@cache
def litellm_prices(model: str) -> tuple[float, float]:
    """(input, output) dollars per million tokens for `model`, as litellm prices it."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises a bare Exception for an unknown model
        close = difflib.get_close_matches(model, list(litellm.model_cost), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise PxnError(
            f"model {model!r} is not in litellm's price table{hint} "
            "(or give its prices by hand, in dollars per million tokens)"
        ) from None
    prices = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if None in prices:
        raise PxnError(
            f"litellm's price table has no per-token prices for {model!r}; "
            "give them by hand, in dollars per million tokens"
        )
    # Rounded to micro-dollars: 4e-07 * 1e6 is 0.39999999999999997 in floating point.
    return round(prices[0] * PER_MILLION, 6), round(prices[1] * PER_MILLION, 6)
