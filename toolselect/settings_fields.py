"""How one setting of `Settings` is declared (`setting`, read back as a `Field`) and the
parsers of its variable's text, whose `ValueError` is the message a bad value gets.

`toolselect config` prints these declarations as the README's table; `config.load_settings`
applies them. Kept apart from `config.py`, which holds the declarations themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
N = TypeVar("N", int, float)


def _number_in(convert: Callable[[str], N], what: str, lo: N, hi: N) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise ValueError(f"expected {what}, got {text!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"expected a number in {lo}..{hi}, got {value}")
        return value

    return parse


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    return _number_in(int, "a whole number", lo, hi)


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    return _number_in(float, "a number", lo, hi)


def one_of(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {text!r}")
        return value

    return parse


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def auto_or(parse: Callable[[str], T], word: str = "auto") -> Callable[[str], T | None]:
    def parse_or_auto(text: str) -> T | None:
        return None if text.strip().lower() == word else parse(text)

    return parse_or_auto


def stripped(text: str) -> str:
    return text.strip()


def parse_workers(text: str) -> int:
    """`auto` is 0: one worker per core, counted when `serve` starts."""
    return 0 if text.strip().lower() == "auto" else int_in(0, 1024)(text)


@dataclass(frozen=True, slots=True)
class Field:
    """A setting as `load_settings` and the table read it."""

    name: str
    env: str
    parse: Callable[[str], Any]
    doc: str
    unset: str  # the word for None, in the variable and the table
    secret: bool  # may be read from the file `{env}_FILE` names instead (a container secret)
    default: Any

    def default_text(self) -> str:
        """The default as its variable spells it ("" for an unset text)."""
        if self.default is None:
            return self.unset
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, tuple):
            return ",".join(self.default)
        return str(self.default)


def setting(
    default: T,
    env: str,
    parse: Callable[[str], T],
    doc: str,
    *,
    unset: str = "auto",
    secret: bool = False,
    hidden: bool = False,
) -> T:
    """A field of `Settings`, declared once: its default, its variable, the parser of the
    variable's text (whose `ValueError` is the message a bad value gets) and its meaning; a
    `secret` may instead be in the file its variable's `_FILE` twin names, and is left out of
    the repr (a logged `Settings` does not show it), as is a `hidden` one. What pydantic-settings'
    `Field` would hold: `toolselect select`, spawned once per agent turn, reads these settings,
    and pydantic-settings adds ~80 ms to its ~120 (`python -m bench.experiments.settings_import`)."""
    metadata = {"env": env, "parse": parse, "doc": doc, "unset": unset, "secret": secret}
    return field(default=default, repr=not (secret or hidden), metadata=metadata)
