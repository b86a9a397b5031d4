"""core.models: what a call costs from an alias's prices, in exact nano-dollars."""

from __future__ import annotations

import pytest

from ferryman.core.models import NANO_USD_PER_USD, Prices, usd


def test_a_call_costs_its_tokens_at_the_prices_per_million() -> None:
    prices = Prices(input_per_mtok_usd=0.15, output_per_mtok_usd=0.60)
    # 1,000 in at $0.15/M = 150,000 nano-USD; 500 out at $0.60/M = 300,000.
    assert prices.cost_nano_usd(1_000, 500) == 450_000
    assert usd(prices.cost_nano_usd(1_000_000, 1_000_000)) == pytest.approx(0.75)


def test_counts_nobody_reported_cost_nothing() -> None:
    prices = Prices(input_per_mtok_usd=3.0, output_per_mtok_usd=15.0)
    assert prices.cost_nano_usd(None, None) == 0
    assert prices.cost_nano_usd(None, 2) == 30_000
    assert prices.cost_nano_usd(2, None) == 6_000


def test_nano_dollars_read_as_dollars() -> None:
    assert usd(NANO_USD_PER_USD) == 1.0
    assert usd(2_500_000) == 0.0025


@pytest.mark.parametrize("given", [{"input_per_mtok_usd": -0.01}, {"output_per_mtok_usd": -1.0}])
def test_a_negative_price_is_refused(given: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"^prices cannot be negative$"):
        Prices(**given)
