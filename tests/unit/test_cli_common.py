"""The CLI's shared parsing: durations and instants say what is wrong and exit 2."""

from __future__ import annotations

import pytest
import typer

from ferryman.cli.common import EXIT_USAGE, instant, parse_duration, parse_instant


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("90m", 5_400),
        ("12h", 43_200),
        ("30d", 2_592_000),
        ("2w", 1_209_600),
        ("1.5h", 5_400),
        (" 7D ", 604_800),
    ],
)
def test_durations_take_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text, "--expires-in") == seconds


@pytest.mark.parametrize("text", ["30", "0d", "-1d", "1y", "d", "1d12h", ""])
def test_a_duration_without_a_known_unit_or_above_zero_exits_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as caught:
        parse_duration(text, "--expires-in")
    assert caught.value.exit_code == EXIT_USAGE
    assert "--expires-in takes a positive duration with a unit" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2030-01-31T18:00:00Z", 1_896_112_800),
        ("2030-01-31T19:00:00+01:00", 1_896_112_800),
        ("2030-01-31 18:00:00.5+00:00", 1_896_112_800.5),
    ],
)
def test_instants_are_rfc3339_with_an_offset(text: str, epoch: float) -> None:
    assert parse_instant(text, "--expires-at") == epoch


@pytest.mark.parametrize("text", ["2030-01-31T18:00:00", "2030-01-31", "tomorrow", ""])
def test_an_instant_without_an_offset_exits_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as caught:
        parse_instant(text, "--expires-at")
    assert caught.value.exit_code == EXIT_USAGE
    assert "RFC 3339" in capsys.readouterr().err


def test_tables_show_instants_in_utc_to_the_second() -> None:
    assert instant(1_896_112_800.9) == "2030-01-31T18:00:00Z"
    assert instant(None) == "-"


def test_a_server_command_without_its_extra_names_the_extra_to_install(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import typer

    from ferryman.cli.common import needs_server

    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for module, extra in (("uvicorn", "ferryman[server]"), ("boto3.session", "ferryman[aws]")):
        with pytest.raises(typer.Exit) as caught:
            needs_server(missing)(module)
        assert caught.value.exit_code == 2
        assert f"pip install '{extra}'" in capsys.readouterr().err
    with pytest.raises(ModuleNotFoundError):  # our own bug is never dressed up as setup
        needs_server(missing)("ferryman.nowhere")


def test_a_missing_database_file_names_where_relative_paths_start_a_server_url_does_not() -> None:
    from pathlib import Path

    from ferryman.cli.common import no_database_message

    file_hint = no_database_message("./ferryman.db")
    url_hint = no_database_message("postgresql://u@h:5432/nosuch")

    assert "FERRYMAN_DATABASE_URL" in file_hint and str(Path.cwd()) in file_hint
    assert url_hint == ("no database at postgresql://u@h:5432/nosuch: check FERRYMAN_DATABASE_URL")
