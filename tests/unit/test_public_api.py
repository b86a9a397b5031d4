"""The curated public API: exactly these names, no accidental exports."""

from __future__ import annotations

import ferryman


def test_exported_names_are_exactly_the_intended_ones() -> None:
    assert sorted(ferryman.__all__) == ["Client", "ClientError", "WaitTimeoutError"]
    for name in ferryman.__all__:
        assert getattr(ferryman, name).__module__ == "ferryman.client"


def test_package_is_typed() -> None:
    from importlib.resources import files

    assert files("ferryman").joinpath("py.typed").is_file()
