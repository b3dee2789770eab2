"""The Redactor: every key length, every written form of the key, every credential form;
messages otherwise kept; exceptions scrubbed whole."""

from __future__ import annotations

import json
import pickle
import re
import string
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_client import LLMError, ModelClientError, Redactor
from llm_client._redact import REDACTED, SUBSTRING_MIN

# Characters keys are made of: letters, digits and the punctuation of base64, URL-safe
# and provider key formats; and, harder, any printable ASCII but whitespace.
KEY_CHARS = string.ascii_letters + string.digits + "-_.~+/="
HARD_CHARS = "".join(c for c in string.printable if not c.isspace())
# A short key of punctuation alone (")", "--") is the syntax of every message and repr,
# not a key anyone is issued: a short key has a letter or digit (llm_client/_redact.py).
keys = st.one_of(
    st.text(st.sampled_from(KEY_CHARS), min_size=1, max_size=64),
    st.text(st.sampled_from(HARD_CHARS), min_size=1, max_size=64),
).filter(lambda key: len(key) >= SUBSTRING_MIN or any(c.isalnum() for c in key))


def written_forms(key: str) -> set[str]:
    """The key as sent, and as a JSON string or a repr (quoting either way) shows it."""
    slashed = key.replace("\\", "\\\\")
    return {
        key,
        json.dumps(key)[1:-1],
        repr(key)[1:-1],
        slashed.replace("'", "\\'"),
        slashed.replace('"', '\\"'),
    }


def leaks(key: str, text: str) -> bool:
    """Whether ``text`` shows ``key`` in any written form: anywhere for a key of 8
    characters or more, as a token (not glued to a letter or digit where the key ends in
    one) for a shorter one. The marker is ours, not the key ("[" is in "[redacted]")."""
    text = text.replace(REDACTED, " ")
    for form in written_forms(key):
        if len(key) >= SUBSTRING_MIN:
            if form in text:
                return True
            continue
        left = r"(?<![A-Za-z0-9])" if form[0].isalnum() else ""
        right = r"(?![A-Za-z0-9])" if form[-1].isalnum() else ""
        if re.search(left + re.escape(form) + right, text) is not None:
            return True
    return False


def _carriers(key: str) -> list[str]:
    """Texts in which a server, a transport or a repr may show the key."""
    auth = f"Bearer {key}"
    headers = {"Authorization": auth, "Content-Type": "application/json"}
    return [
        key,
        f"Incorrect API key provided: {key}. You can find your API key at ...",
        f"not an HTTP/1.x status line: {f'HTTP/1.1 {auth}'!r}",
        f"not an HTTP/1.x status line: {f'HTTP/1.1 {key} OK'!r}",
        f"malformed response header line: {f'{auth}'!r}",
        f"malformed response header line: {f'{key}: 1'!r}",
        f"invalid Content-Length {key!r}",
        f"headers were {headers!r}",
        json.dumps({"error": {"message": f"echo: {headers}", "headers": headers}}),
        f"authorization: {auth}\r\nx-api-key: {key}\r\n",
        f"GET /v1/models?api_key={quote(key, safe='')}&x=1",
        f"<html><body>{auth}</body></html>",
        f"({key})",
        f"[{key}]",
        f"'{key}'",
        repr(f"quoted {key} in a repr with ' and \""),
        json.dumps(f"quoted {key} in JSON"),
    ]


class TestText:
    @settings(max_examples=300, deadline=None)
    @given(key=keys)
    def test_every_carrier_loses_the_key_at_every_length(self, key: str) -> None:
        """Keys of 1 to 64 characters, of any printable characters: no carrier text shows
        the key after redaction, and redacting twice changes nothing."""
        redact = Redactor([key])
        for text in _carriers(key):
            clean = redact(text)
            assert not leaks(key, clean), (key, text, clean)
            assert redact(clean) == clean

    @settings(max_examples=200, deadline=None)
    @given(key=st.text(st.sampled_from(KEY_CHARS), min_size=SUBSTRING_MIN, max_size=64))
    def test_a_long_key_is_found_glued_to_anything(self, key: str) -> None:
        """A key of 8 characters or more is redacted even inside another word."""
        assert key not in Redactor([key])(f"x{key}y and z{key}")

    @given(
        key=st.text(st.sampled_from(KEY_CHARS), min_size=13, max_size=64),
        cut=st.integers(12, 64),
    )
    def test_a_cut_key_is_redacted(self, key: str, cut: int) -> None:
        """A message cut in the middle of an echoed key: a part of 12 characters or more
        is redacted too."""
        part = key[: min(cut, len(key) - 1)]
        text = f"status line: 'HTTP/1.1 {part}..."
        assert part not in Redactor([key])(text)

    @pytest.mark.parametrize(
        "text",
        [
            "connection dropped before the response started",
            "model 'gpt-4o' at https://api.openai.com/v1: HTTP 500: internal error",
            "timed out after 5 s waiting for a response",
            "the bearer of bad news",
        ],
    )
    def test_a_text_without_the_key_is_kept(self, text: str) -> None:
        """Messages that hold no key and no credential form come out unchanged."""
        assert Redactor(["sk-live-0123456789abcdef"])(text) == text

    def test_a_one_character_key_leaves_words_alone(self) -> None:
        """A key "a" is hidden where it stands alone, and words containing "a" stay."""
        redact = Redactor(["a"])
        assert redact("status line 'HTTP/1.1 a' (a bad answer)") == (
            f"status line 'HTTP/1.1 {REDACTED}' ({REDACTED} bad answer)"
        )

    @pytest.mark.parametrize(
        ("text", "clean"),
        [
            ("Authorization: Bearer other-key", f"Authorization: Bearer {REDACTED}"),
            ("authorization:bearer x", f"authorization:bearer {REDACTED}"),
            ("{'Authorization': 'Basic dXNlcjpw'}", f"{{'Authorization': 'Basic {REDACTED}'}}"),
            ('{\\"x-api-key\\": \\"k\\"}', f'{{\\"x-api-key\\": \\"{REDACTED}\\"}}'),
            ("api_key=k&user=1", f"api_key={REDACTED}&user=1"),
            ("sent Bearer xyz, then", f"sent Bearer {REDACTED}, then"),
        ],
    )
    def test_credential_forms_whatever_the_key(self, text: str, clean: str) -> None:
        """A credential in header, dict, JSON or query form is redacted even when it is
        not this client's key (another client's, or ours cut short)."""
        assert Redactor()(text) == clean

    def test_the_marker_is_never_a_key(self) -> None:
        """Even a key spelt like the marker cannot make redaction grow or loop."""
        redact = Redactor(["redacted"])
        assert redact(f"{REDACTED} and redacted") == f"{REDACTED} and {REDACTED}"
        assert not redact.finds(REDACTED)


class _Loud(Exception):
    """Shows the key from a value that is not a string: it cannot be scrubbed in place."""

    def __init__(self, secret: str) -> None:
        super().__init__("no key in args")
        self.parts = [secret]

    def __str__(self) -> str:
        return f"custom text with {self.parts[0]}"


def _deep_text(exc: BaseException) -> str:
    parts = [str(exc), repr(exc), repr(exc.args), repr(vars(exc))]
    for link in (exc.__cause__, exc.__context__):
        if link is not None:
            parts.append(_deep_text(link))
    return "\n".join(parts)


class TestException:
    KEY = "sk-exc-0123456789"

    def test_args_attributes_and_links_are_scrubbed(self) -> None:
        """An exception's args, string attributes, cause and context lose the key; its
        type stays, so the engine labels it as before."""
        cause = RuntimeError(f"cause with {self.KEY}")
        exc = ValueError(f"bad header {self.KEY!r}")
        exc.__cause__ = cause
        exc.note = f"Bearer {self.KEY}"  # type: ignore[attr-defined]
        clean = Redactor([self.KEY]).exception(exc)
        assert clean is exc and type(clean) is ValueError
        assert self.KEY not in _deep_text(clean)

    def test_an_exception_that_cannot_be_scrubbed_is_replaced(self) -> None:
        """An exception whose own __str__ shows the key becomes a ModelClientError
        with the redacted text and its type's name."""
        clean = Redactor([self.KEY]).exception(_Loud(self.KEY))
        assert isinstance(clean, ModelClientError) and "_Loud: custom text with" in str(clean)
        assert self.KEY not in _deep_text(clean)

    def test_an_llm_error_stays_whole(self) -> None:
        """An LLMError keeps its type and counts, pickles whole, and loses the key."""
        error = LLMError(f"echo {self.KEY}", status=401, model="m", attempts=2)
        clean = Redactor([self.KEY]).exception(error)
        again: Any = pickle.loads(pickle.dumps(clean))
        assert type(again) is LLMError and again.status == 401 and again.attempts == 2
        assert self.KEY not in _deep_text(again) and self.KEY not in str(again)
