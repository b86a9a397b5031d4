"""The names a setting is read by: its place in a section (``worker.concurrency``:
``[worker] concurrency`` in ferryman.toml, FERRYMAN_WORKER__CONCURRENCY) and, for a knob
that had one, its flat name from before sections (``worker_concurrency``,
FERRYMAN_WORKER_CONCURRENCY), which deployments set and which stays read.

Each source (keywords, the environment, the TOML file) is brought to the nested form
on its own, before the sources are merged: so a variable still beats the file whichever
name each uses, and only one source naming a knob twice, by both names and with two
values, is an error.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from ferryman.config.sections import FLAT_NAMES, SECTIONS
from ferryman.core.errors import FerrymanError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping

    from pydantic import BaseModel

ENV_PREFIX = "FERRYMAN_"
DEFAULT_CONFIG_FILE = "ferryman.toml"
NESTED = "__"
# Settings read from a variable other than FERRYMAN_<FIELD>.
_ENV_NAMES = {"tasks_module": f"{ENV_PREFIX}TASKS"}
# The value of a setting whose name holds one of these is never echoed back in an error
# message (api_key, api_key_env, database_url, results_url, base_url, ...): it may be,
# or hold, a credential.
_SECRET_NAME_PARTS = ("key", "secret", "token", "password", "url")
# 16 or more letters and digits with no break: how API keys look, and names do not.
_KEY_LIKE_RUN = re.compile(r"[A-Za-z0-9]{16,}")
# Flat name -> its place, dotted (``worker_concurrency`` -> ``worker.concurrency``).
DOTTED = {flat: f"{section}.{field}" for flat, (section, field) in FLAT_NAMES.items()}
# And back: the flat name of each place that had one.
FLAT_OF = {dotted: flat for flat, dotted in DOTTED.items()}


class ConfigurationError(FerrymanError):
    """The configuration is not valid."""

    code = "invalid_configuration"


def env_name(name: str) -> str:
    """The variable of a top-level field or flat name (``lease_seconds`` ->
    FERRYMAN_LEASE_SECONDS), or of a place in a section (``worker.lease_seconds`` ->
    FERRYMAN_WORKER__LEASE_SECONDS)."""
    if name in _ENV_NAMES:
        return _ENV_NAMES[name]
    return ENV_PREFIX + NESTED.join(part.upper() for part in name.split("."))


def section_fields() -> Iterable[str]:
    """Every place in a section, dotted: ``sqlite.synchronous``, ``worker.concurrency``, ..."""
    for section, model in SECTIONS.items():
        for field in model.model_fields:
            yield f"{section}.{field}"


def nest_flat_names(
    data: Mapping[str, Any], naming: Callable[[str], str], where: str = ""
) -> dict[str, Any]:
    """``data`` with each flat name moved to its section (a new dict; sections copied).

    ``naming`` spells a name as this source does (a flat name as given, a place
    dotted) and ``where`` says which source it is, for the error raised when both
    names are given, with values that differ: ConfigurationError naming both.
    """
    nested = dict(data)
    for flat in [key for key in data if key in FLAT_NAMES]:
        section, field = FLAT_NAMES[flat]
        value = nested.pop(flat)
        table = nested.get(section)
        table = dict(table) if isinstance(table, dict) else {}
        if field in table and not _same(section, field, table[field], value):
            old, new = naming(flat), naming(DOTTED[flat])
            raise ConfigurationError(
                f"{old} and {new}{where} are set to different values, but they are one "
                f"setting ({new} is its new name, {old} its old one): set only one"
            )
        table[field] = value
        nested[section] = table
    return nested


def _same(section: str, field: str, first: Any, second: Any) -> bool:
    """Whether two values given for one field mean the same (``8`` and ``"8"`` do)."""
    if first == second:
        return True
    info = SECTIONS[section].model_fields[field]
    adapter: TypeAdapter[Any] = TypeAdapter(Any if info.annotation is None else info.annotation)
    try:
        return bool(adapter.validate_python(first) == adapter.validate_python(second))
    except ValidationError:
        return False


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` most resembles, if one is close (difflib's 0.6 cutoff)."""
    found = difflib.get_close_matches(name, list(candidates), n=1)
    return found[0] if found else None


def toml_names() -> set[str]:
    """Every name ferryman.toml may use at the top level or within a section, dotted."""
    return {*FLAT_NAMES, *section_fields()}


def toml_key(name: str) -> str:
    """A name as ferryman.toml writes it: ``worker_concurrency``, ``[worker] concurrency``."""
    section, dot, field = name.partition(".")
    return f"[{section}] {field}" if dot else name


def may_be_secret(text: str) -> bool:
    """Whether a string may be a credential, so a message must not show it: a run of 16
    or more letters and digits mixing both (OpenAI's, Anthropic's and AWS's keys all
    have one; OPENAI_API_KEY or a path does not), or a URL with a user in it."""
    if "@" in text:
        return True
    return any(
        any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
        for run in _KEY_LIKE_RUN.findall(text)
    )


# --- one line per validation error ------------------------------------------------------


def describe_error(
    error: dict[str, Any],
    *,
    top_level: Collection[str],
    tables: Mapping[str, type[BaseModel]],
) -> str:
    """One line for one of Settings' validation errors, naming the setting as each
    source spells it and showing the value only when that is safe. ``top_level``: the
    names Settings takes; ``tables``: its keyed tables' models (providers, ...)."""
    loc = [str(part) for part in error.get("loc", ())]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if not loc or (len(loc) == 1 and loc[0] in SECTIONS and error.get("type") == "value_error"):
        return message  # a rule across settings: its message names them (never the input)
    if error.get("type") == "extra_forbidden":
        return _unknown(loc, top_level, tables)
    field = loc[0]
    if field in SECTIONS and len(loc) == 2:
        variables, keys = _names_of(".".join(loc))
        return f"{variables} ({keys} in {DEFAULT_CONFIG_FILE}): {message}" + _shown_input(
            loc, error
        )
    if len(loc) > 1 or field in tables:
        # A table's field: name the place. Tasks' values are prompts and schemas, never shown.
        where = ".".join(loc)
        place = f"{where} (in {DEFAULT_CONFIG_FILE}, or {env_name(where)})"
        return f"{place}: {message}{_shown_input(loc, error) if field != 'tasks' else ''}"
    return f"{env_name(field)} (or {field} in {DEFAULT_CONFIG_FILE}): {message}" + (
        _shown_input(loc, error)
    )


def _names_of(place: str) -> tuple[str, str]:
    """The variables and the TOML keys of a place in a section, new name first."""
    flat = FLAT_OF.get(place)
    if flat is None:
        return env_name(place), toml_key(place)
    return f"{env_name(place)} or {env_name(flat)}", f"{toml_key(place)} or {flat}"


def _unknown(
    loc: list[str], top_level: Collection[str], tables: Mapping[str, type[BaseModel]]
) -> str:
    """The message for a name nothing reads, with the closest known one if any is close."""
    if len(loc) == 1:
        near = closest(loc[0], {*top_level, *FLAT_NAMES})
        hint = near if near not in DOTTED else f"{near}, now {toml_key(DOTTED[near])}"
        suffix = f"; did you mean {hint}?" if near else ""
        return f"{loc[0]}: unknown setting (not a ferryman configuration name{suffix})"
    table: type[BaseModel] | None = SECTIONS.get(loc[0]) if len(loc) == 2 else None
    if len(loc) == 3:
        table = tables.get(loc[0])
    near = closest(loc[-1], table.model_fields) if table is not None else None
    where = ".".join(loc)
    hint = f" (did you mean {'.'.join([*loc[:-1], near])}?)" if near else ""
    return f"{where} (in {DEFAULT_CONFIG_FILE}, or {env_name(where)}): unknown field{hint}"


def _shown_input(loc: list[str], error: dict[str, Any]) -> str:
    """``, got VALUE`` for a wrong value it is safe to show; nothing for a value that may
    be a credential (by the setting's name or by its look) or a whole table."""
    value = error.get("input")
    secret_name = any(part in loc[-1].lower() for part in _SECRET_NAME_PARTS)
    if secret_name or not isinstance(value, str | int | float | bool):
        return ""
    if isinstance(value, str) and may_be_secret(value):
        return ""
    return f", got {value!r}"
