"""``ferryman models``: which model aliases jobs may name, and whether their providers answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ferryman.cli.common import EXIT_FAILED, fail, print_json, print_table, run, settings, warn
from ferryman.core.errors import FerrymanError
from ferryman.services.catalog import ProviderReport, provider_reports

if TYPE_CHECKING:
    from ferryman.services.catalog import ModelCatalog


def models(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check",
            help="Ask each provider to prove it answers and takes the key (a cheap call).",
        ),
    ] = True,
) -> None:
    """List the model aliases and providers, and check each provider (exit 1 if one fails).

    An alias that gives no prices is marked: its calls' cost would show as $0."""
    from ferryman.wiring import build_catalog

    s = settings()
    try:
        # Unchecked, no provider is asked anything: the list needs none of their keys.
        catalog = build_catalog(s, providers_on_first_use=not check)
    except FerrymanError as exc:
        fail(exc.message)
    reports = run(_reports(catalog, check=check))
    unpriced = s.unpriced_models()
    if as_json:
        print_json(_as_json(catalog, reports, unpriced))
    else:
        print_table(_aliases_table(catalog, unpriced))
        print_table(_providers_table(catalog, reports))
    for alias, fields in unpriced.items():
        warn(
            f"models.{alias} gives no {' or '.join(fields)}: its calls' cost shows as $0 "
            "(give 0 for a free model)"
        )
    if any(not report.ok for report in reports):
        raise typer.Exit(EXIT_FAILED)


async def _reports(catalog: ModelCatalog, *, check: bool) -> list[ProviderReport]:
    try:
        return await provider_reports(catalog) if check else []
    finally:
        await catalog.aclose()


def _as_json(
    catalog: ModelCatalog, reports: list[ProviderReport], unpriced: dict[str, list[str]]
) -> dict[str, Any]:
    checked = {report.name: report for report in reports}
    return {
        "models": [
            {
                "alias": alias.name,
                "provider": alias.provider,
                "model": alias.model,
                "input_price_per_mtok": alias.prices.input_per_mtok_usd,
                "output_price_per_mtok": alias.prices.output_per_mtok_usd,
                # False: a price was not given, so the one above (0) is not a real price.
                "prices_given": alias.name not in unpriced,
                "fallbacks": list(alias.fallbacks),
            }
            for alias in catalog.aliases()
        ],
        "providers": [
            {
                "name": provider.name,
                "ok": checked[provider.name].ok if provider.name in checked else None,
                "detail": checked[provider.name].detail if provider.name in checked else None,
            }
            for provider in catalog.providers()
        ],
    }


def _aliases_table(catalog: ModelCatalog, unpriced: dict[str, list[str]]) -> Table:
    table = Table(title='models (what a job\'s "model" may name)')
    for column in ("alias", "provider", "model", "$/Mtok in", "$/Mtok out", "fallbacks"):
        table.add_column(column, no_wrap=True)
    for alias in catalog.aliases():
        missing = unpriced.get(alias.name, [])
        table.add_row(
            Text(alias.name),
            Text(alias.provider),
            Text(alias.model),
            _price(alias.prices.input_per_mtok_usd, "input_price_per_mtok" in missing),
            _price(alias.prices.output_per_mtok_usd, "output_price_per_mtok" in missing),
            Text(", ".join(alias.fallbacks) or "-"),
        )
    return table


def _price(usd: float, missing: bool) -> Text:
    """A price, or ``unset`` where none was given (its calls' cost would show as $0)."""
    return Text("unset", style="bold yellow") if missing else Text(f"{usd:g}")


def _providers_table(catalog: ModelCatalog, reports: list[ProviderReport]) -> Table:
    checked = {report.name: report for report in reports}
    table = Table(title="providers")
    table.add_column("provider", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("detail")
    for provider in catalog.providers():
        report = checked.get(provider.name)
        if report is None:
            status = Text("not checked", style="dim")
        else:
            status = Text("ok", style="green") if report.ok else Text("FAIL", style="bold red")
        table.add_row(Text(provider.name), status, Text(report.detail if report else ""))
    return table
