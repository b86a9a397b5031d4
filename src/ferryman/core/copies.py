"""A fast ``dataclasses.replace`` for a frozen, slotted dataclass with no ``__post_init__``.

A job changes by copy (core/job.py), several times per job on the worker's path, and
the Job has over thirty fields. ``dataclasses.replace`` looks every field up through
``fields()`` and then goes through the frozen ``__init__``, which sets each field
with a global lookup and a call: about 2.5 times the cost of a copy that sets every
slot straight from the old instance. The copy made here is that: code generated once
per class (as ``dataclasses`` itself generates ``__init__``), one line per field.

It is typed where it is used as ``dataclasses.replace`` itself (see core/job.py), so
mypy's dataclass plugin still checks every field name and value type of every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Replace(Protocol[T]):
    def __call__(self, obj: T, /, **changes: Any) -> T: ...


def replacer(cls: type[T]) -> Replace[T]:
    """``dataclasses.replace`` for instances of ``cls`` (exactly ``cls``).

    Like it, every field is copied unless given, an unknown field name raises
    TypeError, and the original is never touched. Unlike it, no ``__init__`` or
    ``__post_init__`` runs, so ``cls`` must not need one: it is refused here unless it
    is a frozen, slotted dataclass without ``__post_init__`` and with every field in
    ``__init__``.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which a copy would skip")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__} has a field outside __init__")
    names = [f.name for f in fields]
    # Each slot's own setter: it sets the slot past the frozen __setattr__, as the
    # dataclass's __init__ does, without a name lookup per field.
    namespace: dict[str, Any] = {f"_set_{name}": getattr(cls, name).__set__ for name in names}
    namespace.update(_new=object.__new__, _cls=cls)
    lines = [
        f"def replace_{cls.__name__}(obj, /, **changes):",
        "    new = _new(_cls)",
        "    take = changes.pop",
        *(f"    _set_{name}(new, take({name!r}, obj.{name}))" for name in names),
        "    if changes:",
        "        raise TypeError(",
        f"            f'{cls.__name__}.__init__() got an unexpected keyword argument "
        "{next(iter(changes))!r}')",
        "    return new",
    ]
    exec("\n".join(lines), namespace)
    replace: Replace[T] = namespace[f"replace_{cls.__name__}"]
    return replace
