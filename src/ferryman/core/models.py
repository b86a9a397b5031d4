"""Model aliases and what a call costs.

Jobs name an alias (``"model": "fast"``); operators decide what it means: which
provider, which of its models, at what price, and which aliases to fall back on.
Prices are US dollars per million tokens, as providers publish them; costs are
kept as whole nano-dollars, so sums over many attempts are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

NANO_USD_PER_USD = 1_000_000_000
_TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True, slots=True)
class Prices:
    input_per_mtok_usd: float = 0.0
    output_per_mtok_usd: float = 0.0

    def __post_init__(self) -> None:
        if self.input_per_mtok_usd < 0 or self.output_per_mtok_usd < 0:
            raise ValueError("prices cannot be negative")

    def cost_nano_usd(self, input_tokens: int | None, output_tokens: int | None) -> int:
        """What a call with these token counts cost (0 for counts nobody reported)."""
        nano_per_token_in = self.input_per_mtok_usd * NANO_USD_PER_USD / _TOKENS_PER_PRICE_UNIT
        nano_per_token_out = self.output_per_mtok_usd * NANO_USD_PER_USD / _TOKENS_PER_PRICE_UNIT
        return round(
            (input_tokens or 0) * nano_per_token_in + (output_tokens or 0) * nano_per_token_out
        )


@dataclass(frozen=True, slots=True)
class ModelAlias:
    """``[models.NAME]``: a provider, its model id, prices, and aliases to fall back on."""

    name: str
    provider: str
    model: str
    prices: Prices = Prices()
    fallbacks: tuple[str, ...] = ()


def usd(nano_usd: int) -> float:
    return nano_usd / NANO_USD_PER_USD
