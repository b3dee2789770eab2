"""Keeping the API key out of every text the model client makes or passes on.

A provider, a proxy or a broken server may echo the request's headers back anywhere: in
an error body, a status line, a header name or value, a chunked trailer. The transports
quote what they could not parse (so that a user can see what the server sent), and the
client quotes provider error messages; every such text passes through one
:class:`Redactor`, built from the client's key, before it leaves ``llm_client``: in an
``LLMError``, a ``RetryDetails.reason``, or an unexpected exception out of a transport.

The rule, and why:

1. **Credential forms, whatever the key.** ``Bearer <token>``, and the value of an
   ``Authorization``, ``api-key`` or ``x-api-key`` header in any spelling a server may
   echo it (a header line, a Python or JSON dict, ``key=value``): the token becomes
   ``[redacted]``. This catches an echo of our own header even when it was cut short,
   and whatever the key's length.
2. **The key itself, in each written form** (as sent; JSON-escaped, Python-escaped and
   percent-encoded, as a server or a repr may re-encode it; in any case, since a
   transport may lowercase what it quotes, a header value say):

   - a key of :data:`SUBSTRING_MIN` characters or more: **every occurrence**, anywhere.
     A random string that long does not occur in a message by chance.
   - a shorter key (``"a"``, ``"test"``, ``"ollama"``): **every occurrence that stands
     as a token**: not glued to a letter or digit on a side where the key itself ends
     in one. Replacing every substring would hide a 1-character key only by destroying
     every message ("conne[redacted]tion dropped"); a token match hides the key
     wherever a server can echo it (after ``Bearer``, between quotes, in a header line,
     after ``=``), and what it may also hide is a word equal to the key, which a reader
     could not tell from the key anyway.
3. **Cut keys.** :data:`FRAGMENT_MIN` or more of a key's characters in a row that are a
   piece of the key (a message cut in the middle of an echoed key, the piece at the start
   or end of a run of such characters) are replaced too.

Texts that are data, not error messages (a model's successful reply, an output, a
metric's feedback), go through :meth:`Redactor.secrets` instead: rules 2 and 3 only, for
keys of :data:`SUBSTRING_MIN` characters or more. A reply may quote ``Bearer`` or
``api_key=`` as its content, and a short key is a word it may hold; replacing either
would change the data, and neither leaks a secret.

No key is too short: rule 2 applies to every length from 1. A marker already in a text
is kept as it is (even for a key spelt ``redacted``), so redacting twice changes nothing.
A 1-character key whose character is in the marker (``[``) is "shown" by every marker;
that is the marker, not the key. A short key made of punctuation alone (``)``, ``--``) is
redacted as a token like any other, but it is also the syntax of every message and repr
(``LLMError("...")``), so no text can be free of it; keys are issued with letters and
digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus

__all__ = ["FRAGMENT_MIN", "REDACTED", "SUBSTRING_MIN", "Redactor"]

REDACTED = "[redacted]"
#: Keys at least this long are redacted wherever they occur; shorter ones as tokens.
SUBSTRING_MIN = 8
#: A run of a key's characters at least this long that is part of the key is redacted.
FRAGMENT_MIN = 12

# While a text is scrubbed, the marker stands as one private-use character: no rule can
# match inside it or take it for a token, so redacting twice changes nothing.
_MARK = "\ue000"
# What ends a credential token in the texts servers echo: space, quotes, separators,
# closing brackets, ``&`` (a query string), a backslash (an escaped quote in JSON), the
# marker.
_END = rf"\s\"'`,;&)\]}}>\\{_MARK}"
_TOKEN = rf"[^{_END}]+"
# The scheme as HTTP clients send it; lowercase "bearer" is English too ("the bearer of").
_BEARER = re.compile(rf"\b(Bearer|BEARER)(\s+){_TOKEN}")
# ``Authorization: Bearer x``, ``'authorization': 'x'``, ``\"x-api-key\":\"x\"``, ``api_key=x``
_HEADER = re.compile(
    rf"(?i)\b(authorization|x-api-key|api[-_]key)"
    rf"(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    rf"(?!(?:(?:bearer|basic|token)\s+)?{_MARK})"
    rf"(?:(bearer|basic|token)(\s+))?{_TOKEN}"
)


def _header_repl(match: re.Match[str]) -> str:
    name, sep, scheme, space = match.group(1, 2, 3, 4)
    return f"{name}{sep}{scheme}{space}{_MARK}" if scheme else f"{name}{sep}{_MARK}"


def _bearer_repl(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{_MARK}"


def _forms(key: str) -> list[str]:
    """The ways ``key`` may be written in a text, longest first."""
    backslashed = key.replace("\\", "\\\\")
    forms = {
        key,
        json.dumps(key)[1:-1],
        json.dumps(key, ensure_ascii=False)[1:-1],
        repr(key)[1:-1],
        # inside a repr or JSON string that quotes with the other quote character
        backslashed.replace("'", "\\'"),
        backslashed.replace('"', '\\"'),
        quote(key, safe=""),
        quote_plus(key, safe=""),
    }
    return sorted((f for f in forms if f), key=len, reverse=True)


def _key_pattern(key: str) -> str:
    """The alternation that finds ``key`` in any of its forms (rule 2); matched without
    regard to case, since a transport may lowercase what it quotes (a header value)."""
    parts = []
    for form in _forms(key):
        escaped = re.escape(form)
        if len(key) < SUBSTRING_MIN:
            if form[0].isalnum():
                escaped = r"(?<![A-Za-z0-9])" + escaped
            if form[-1].isalnum():
                escaped += r"(?![A-Za-z0-9])"
        parts.append(escaped)
    return "|".join(parts)


def _probes(keys: list[str]) -> tuple[str, ...]:
    """Lower-case pieces one of which is in every text :meth:`Redactor.secrets` changes.

    Each written form of each key (rule 2); for a key long enough for rule 3, its pieces
    of ``FRAGMENT_MIN // 2`` characters at multiples of that length: every run of
    ``FRAGMENT_MIN`` of the key's characters holds one of them whole. A piece that holds
    another is dropped (the shorter one is found wherever the longer is).
    """
    step = FRAGMENT_MIN // 2
    found: set[str] = set()
    for key in keys:
        found.update(form.lower() for form in _forms(key))
        if len(key) > FRAGMENT_MIN:
            low = key.lower()
            found.update(low[i : i + step] for i in range(0, len(low) - step + 1, step))
    ordered = sorted(found, key=len)
    kept: list[str] = []
    for probe in ordered:
        if not any(shorter in probe for shorter in kept):
            kept.append(probe)
    return tuple(kept)


class Redactor:
    """Removes ``keys`` (and every credential form) from texts and exceptions.

    Built once per client (the pattern is compiled then); :meth:`text` is cheap on a
    clean text. ``Redactor()`` with no key still applies the credential-form rule.
    """

    __slots__ = ("_fragment", "_keys", "_long", "_lower", "_pattern", "_probes")

    def __init__(self, keys: Iterable[str | None] = ()) -> None:
        self._keys = tuple(sorted({k for k in keys if k}, key=len, reverse=True))
        alternatives = [_key_pattern(k) for k in self._keys]
        self._pattern = re.compile("|".join(alternatives), re.IGNORECASE) if alternatives else None
        # Rule 2 for the keys long enough to be redacted wherever they occur (secrets()).
        long = [k for k in self._keys if len(k) >= SUBSTRING_MIN]
        self._long = re.compile("|".join(map(_key_pattern, long)), re.IGNORECASE) if long else None
        self._probes = _probes(long)
        # Pieces of keys are compared in lower case, for the same reason.
        self._lower = tuple(k.lower() for k in self._keys if len(k) > FRAGMENT_MIN)
        chars = "".join(sorted({c for k in self._lower for c in k + k.upper()}))
        self._fragment = (
            re.compile(f"[{re.escape(chars)}]{{{FRAGMENT_MIN},}}") if self._lower else None
        )

    def text(self, text: str) -> str:
        """``text`` with every key and credential replaced by ``[redacted]``."""
        text = text.replace(REDACTED, _MARK)
        if self._pattern is not None:
            text = self._pattern.sub(_MARK, text)
        if self._fragment is not None:
            text = self._fragment.sub(self._cut_key, text)
        text = _HEADER.sub(_header_repl, text)
        text = _BEARER.sub(_bearer_repl, text)
        return text.replace(_MARK, REDACTED)

    __call__ = text

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys this redactor hides (longest first)."""
        return self._keys

    def secrets(self, text: str) -> str:
        """``text`` with only the keys themselves replaced: rules 2 and 3 for keys of
        :data:`SUBSTRING_MIN` characters or more, no credential forms, no short keys.

        For texts that are data, not error messages: a model's reply, an output, a
        metric's feedback. A reply may quote ``Bearer`` or ``api_key=`` as content, and
        a short key (``"test"``, ``"ollama"``) is a word a reply may hold, which
        replacing would change; neither is a secret the text can leak. A text with no
        key in it is returned as it is (the same object), after :meth:`might_hold`.
        """
        if self._long is None or not self.might_hold(text):
            return text
        marked = text.replace(REDACTED, _MARK)
        marked = self._long.sub(_MARK, marked)
        if self._fragment is not None:
            marked = self._fragment.sub(self._cut_key, marked)
        clean = marked.replace(_MARK, REDACTED)
        return text if clean == text else clean

    def might_hold(self, text: str) -> bool:
        """False when ``text`` certainly holds none of what :meth:`secrets` replaces: a
        few substring searches of its lower case (much faster than the rules' patterns),
        so that clean texts, the usual case, cost almost nothing."""
        low = text.lower()
        return any(probe in low for probe in self._probes)

    def _cut_key(self, match: re.Match[str]) -> str:
        """A run of key characters: the part of it that is a piece of a key (the whole
        run, or its start or end, where a cut or a neighbouring character left it)."""
        run = match.group(0)
        low = run.lower()
        if any(low in key for key in self._lower):
            return _MARK
        head = self._longest(low, lambda n: low[:n])
        tail = self._longest(low, lambda n: low[len(low) - n :])
        if head + tail >= len(run):
            return _MARK
        return (_MARK if head else "") + run[head : len(run) - tail] + (_MARK if tail else "")

    def _longest(self, run: str, piece: Callable[[int], str]) -> int:
        """The longest ``piece(n)`` (n >= FRAGMENT_MIN) found in a key, or 0; ``piece(n)``
        in a key implies ``piece(n - 1)`` in it, so a binary search finds it."""
        low, high = FRAGMENT_MIN - 1, min(len(run), max(len(k) for k in self._lower))
        while low < high:
            mid = (low + high + 1) // 2
            if any(piece(mid) in key for key in self._lower):
                low = mid
            else:
                high = mid - 1
        return low if low >= FRAGMENT_MIN else 0

    def finds(self, text: str) -> bool:
        """Whether ``text`` holds a key, as :meth:`text` would find it."""
        return self.text(text) != text

    def exception(self, exc: BaseException) -> BaseException:
        """``exc`` with its text redacted: its string arguments and string attributes
        in place, a cause or context that holds a key dropped. An exception whose text
        still holds a key after that (its own ``__str__``) is replaced by a
        :class:`~llm_client.ModelClientError` with the redacted text, of its type's name.
        """
        exc.args = tuple(self.text(a) if isinstance(a, str) else a for a in exc.args)
        state = getattr(exc, "__dict__", None)
        if state is not None:
            for name, value in list(state.items()):
                if isinstance(value, str):
                    state[name] = self.text(value)
        for link in ("__cause__", "__context__"):
            linked = getattr(exc, link)
            if linked is not None and self.finds(_text_of(linked)):
                setattr(exc, link, None)
        exc.__suppress_context__ = exc.__context__ is None or exc.__suppress_context__
        shown = _str_of(exc)
        if self.finds(shown):
            from ._exceptions import ModelClientError

            return ModelClientError(f"{type(exc).__name__}: {self.text(shown)}")
        return exc


def _str_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a __str__ that raises: nothing to read
        return type(exc).__name__


def _text_of(exc: BaseException) -> str:
    try:
        return f"{exc}\n{exc!r}"
    except Exception:  # a __str__ or __repr__ that raises: nothing to read
        return type(exc).__name__
