"""``--config FILE``: a command's flags from a TOML file, and ``.env`` for key variables.

Every flag of ``run``, ``check`` and ``judges`` is a key of the file, spelt as the flag
without its dashes (``metric-model = "judge-mini"``; ``metric_model`` too); a flag that
takes no value is ``true``, a repeatable one a list. A relative path (``metric``,
``data``, ``output``...) is read against the file's folder, so a run file can sit with
its metric and data. The file's keys become words before the command line's, so every
flag given on the command line wins: a single-valued flag because argparse keeps the last
one, a list (``--input-cols``) or one of a group (``--limit``/``--sample``/``--ids``)
because the file's value is then left out. So argparse checks a file's values as it
checks the command line's; what it cannot place is said here with the file, the line and
the key (and the key it may have meant).

``.env`` in the working folder is read before a command that calls models: each
``NAME=value`` line sets ``NAME`` unless it is set already (the environment always wins).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluator import ConfigError

__all__ = ["FLAG", "PATH_KEYS", "config_words", "read_dotenv"]

#: The flag that names a config file (on run, check and judges).
FLAG = "--config"

#: The keys whose values are files or folders: relative ones are the config file's.
PATH_KEYS = frozenset(
    {"metric", "program", "artifact", "data", "output", "report", "cache", "simulator"}
    | {"models_file", "plot"}
)


def _line_of(text: str, key: str) -> int | None:
    """The line that sets ``key`` (as written, dashes or underscores), if one does."""
    spellings = {key, key.replace("_", "-"), key.replace("-", "_")}
    pattern = re.compile(r"^\s*(" + "|".join(map(re.escape, spellings)) + r")\s*=")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


def _given(words: Sequence[str], parser: argparse.ArgumentParser) -> set[str]:
    """The ``dest`` of every flag on the command line."""
    given = set()
    for word in words:
        if word.startswith("--"):
            action = parser._option_string_actions.get(word.split("=", 1)[0])
            if action is not None:
                given.add(action.dest)
    return given


def _skipped(parser: argparse.ArgumentParser, given: set[str]) -> set[str]:
    """The dests a file's value is left out for: given on the command line, or in a
    one-of group with one given there."""
    out = set(given)
    for group in parser._mutually_exclusive_groups:
        dests = {a.dest for a in group._group_actions}
        if dests & given:
            out |= dests
    for dest, companions in _COMPANIONS.items():
        if dest in out:
            out |= companions - given
    return out


#: Flags that only mean something with another: left out when it is.
_COMPANIONS = {"sample": {"seed"}}


def config_words(path: str, parser: argparse.ArgumentParser, words: Sequence[str]) -> list[str]:
    """The words ``path`` stands for, for the command of ``parser``; ``words`` (the
    command line after the command) decide which of its values are left out."""
    import tomllib

    file = Path(path)
    if not file.is_file():
        what = "a folder, not a file" if file.is_dir() else "no such file"
        raise ConfigError(f"--config {path}: {what}")
    text = file.read_text(encoding="utf-8")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not TOML: {exc}") from None
    flags = {
        a.dest: a
        for a in parser._actions
        if any(s.startswith("--") for s in a.option_strings) and a.dest not in ("help", "config")
    }
    skip = _skipped(parser, _given(words, parser))
    out: list[str] = []
    for key, value in table.items():
        dest = key.replace("-", "_")
        where = f"{path}:{_line_of(text, key) or '?'}: {key}"
        action = flags.get(dest)
        if dest == "config":
            raise ConfigError(f"{where}: a config file cannot name another; merge the two")
        if action is None:
            known = sorted(d.replace("_", "-") for d in flags)
            close = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{where}: no such key: `{parser.prog}` has no --{key.replace('_', '-')}"
                f"{hint} (every key is one of its flags without the dashes)"
            )
        if dest in skip:
            continue
        out += _words(action, value, where, file.parent if dest in PATH_KEYS else None)
    return out


def _words(action: argparse.Action, value: Any, where: str, base: Path | None) -> list[str]:
    """``--flag value`` for one key, its value checked for its TOML type."""
    flag = next(s for s in action.option_strings if s.startswith("--"))
    if action.nargs == 0:  # a switch: true or false
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return [flag] if value else []
    many = isinstance(action, (argparse._AppendAction, argparse._ExtendAction))
    items = value if isinstance(value, list) and many else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, (bool, dict, list)):
            raise ConfigError(f"{where}: must be {_kind(action)}, got {item!r}")
        if action.type in (int, float) and not isinstance(item, (int, float)):
            raise ConfigError(f"{where}: must be {_kind(action)}, got {item!r}")
        if action.type is int and not isinstance(item, int):
            raise ConfigError(f"{where}: must be a whole number, got {item!r}")
        if action.choices is not None and item not in action.choices:
            close = difflib.get_close_matches(str(item), [str(c) for c in action.choices], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            choices = ", ".join(map(str, action.choices))
            raise ConfigError(f"{where}: must be one of {choices}, got {item!r}{hint}")
        word = str(item)
        if base is not None and not Path(word).is_absolute() and "://" not in word:
            word = str(base / word)
        out += [flag, word]
    return out


def _kind(action: argparse.Action) -> str:
    if action.type is int:
        return "a whole number"
    if action.type is float:
        return "a number"
    return "text"


_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def read_dotenv(path: str | Path = ".env") -> list[str]:
    """Set each ``NAME=value`` of ``path`` that the environment does not set yet; the
    names set. Blank lines and ``#`` comments are skipped; a value may be quoted."""
    file = Path(path)
    if not file.is_file():
        return []
    set_now = []
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _DOTENV_LINE.match(line)
        if match is None:
            continue
        name, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if name not in os.environ:
            os.environ[name] = value
            set_now.append(name)
    return set_now
