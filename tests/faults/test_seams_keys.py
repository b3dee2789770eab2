"""Keys and usage where the model client meets the engine's configuration and outputs.

Three classes of input (issue 24, items 2, 6 and 8), each against real HTTP servers on
127.0.0.1 that record what they were sent and answer what a test asks:

- **Which key reaches which host.** Every way a models file, or the command line, can
  place ``base_url`` and ``api_key_env`` (a model's own table, its provider's, the
  command line's fallback): a key reaches only the base URL written beside it, or the
  file is refused naming file, line, model and key, and then no host hears anything.
- **A key in a successful reply.** A server that echoes the request's key in a normal
  reply, and user code that puts a key it read into its output or feedback: the key is
  nowhere in the results, the results file, the JSON and table reports, the HTML page,
  or anything printed.
- **Usage that cannot be true.** Negative, absurd (more than 10^9), fractional, string,
  boolean and null token counts, through ``complete()`` and forwarded SDK calls of every
  reply shape: the call's cost is unmeasured with the reason, never negative, never a
  clamped $0; a program whose call reported such usage is not an error of the metric's.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import textwrap
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator import Evaluator, Models
from evaluator._call._results import Observation, Result
from evaluator._cli import main
from evaluator._judges import ModelsFileError, judges_from_flags, load_models_file
from evaluator._scrub import ResultScrubber
from llm_client import ModelClient, ModelConfig, ModelConfigError, Redactor
from llm_client._redact import FRAGMENT_MIN, REDACTED, SUBSTRING_MIN
from llm_client._usage import MAX_TOKENS
from tests._helpers import result_rows

KEY = "sk-seam-" + "Qw7Er4Ty1Ui9Op3As6Df2Gh5Jk8Lz0Xc"
OTHER = "sk-other-" + "Mn4Bv7Cx1Za9Sd3Fg6Hj2Kl5Po8Iu0Yt"


# -- a provider on 127.0.0.1 ---------------------------------------------------------------


class Provider:
    """An OpenAI-compatible server in a thread: records each request's path and key,
    answers chat completions (and the Responses and Anthropic shapes) with ``usage`` as
    set, and, when ``echo`` is on, the request's key in the reply's text."""

    DEFAULT_USAGE: ClassVar[dict[str, Any]] = {"prompt_tokens": 10, "completion_tokens": 5}

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.usage: Any = dict(self.DEFAULT_USAGE)
        #: True: the request's Authorization header in the reply; a function: what it
        #: makes of the key (upper case, cut, JSON-escaped...).
        self.echo: bool | Callable[[str], str] = False
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                auth = self.headers.get("Authorization") or self.headers.get("x-api-key")
                with provider._lock:
                    provider.seen.append((self.path, auth))
                    usage, echo = provider.usage, provider.echo
                if callable(echo):
                    text = f"PASS. Your key was {echo((auth or '').removeprefix('Bearer '))}."
                else:
                    text = f"PASS. Your headers: Authorization: {auth}" if echo else "PASS"
                body = json.dumps(provider.reply(self.path, text, usage)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @staticmethod
    def reply(path: str, text: str, usage: Any) -> dict[str, Any]:
        if path.endswith("/messages"):
            return {"type": "message", "content": [{"type": "text", "text": text}], "usage": usage}
        if path.endswith("/responses"):
            return {"object": "response", "output_text": text, "usage": usage}
        return {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": usage,
        }

    def auths(self) -> set[str | None]:
        with self._lock:
            return {auth for _, auth in self.seen}

    def __enter__(self) -> Provider:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    with Provider() as server:
        yield server


@pytest.fixture
def two() -> Iterator[tuple[Provider, Provider]]:
    with Provider() as a, Provider() as b:
        yield a, b


JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    return (1.0 if "PASS" in reply else 0.0), {"feedback": reply}
"""


def _files(tmp_path: Path, metric: str = JUDGE, rows: int = 2) -> tuple[Path, Path]:
    (tmp_path / "metric.py").write_text(textwrap.dedent(metric))
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "input": {}, "output": f"o{i}"}) + "\n" for i in range(rows))
    )
    return tmp_path / "metric.py", data


# -- item 2: which key reaches which host --------------------------------------------------


def _table(header: str, url: str | None, env: str | None) -> str:
    lines = [header]
    if url is not None:
        lines.append(f'base_url = "{url}"')
    if env is not None:
        lines.append(f'api_key_env = "{env}"')
    return "\n".join(lines) + "\n"


LEVELS = list(itertools.product((False, True), repeat=4))


@pytest.mark.parametrize("fallback", [False, True], ids=["no-flags", "flags"])
@pytest.mark.parametrize(
    ("model_url", "model_env", "provider_url", "provider_env"),
    LEVELS,
    ids=[
        "-".join(n for n, on in zip(("mu", "mk", "pu", "pk"), c, strict=True) if on) or "none"
        for c in LEVELS
    ],
)
def test_the_pair_comes_from_one_place(
    tmp_path: Path,
    model_url: bool,
    model_env: bool,
    provider_url: bool,
    provider_env: bool,
    fallback: bool,
) -> None:
    """Every placement of base_url and api_key_env in a model, its provider and the
    command line: a model's URL and key variable come from the same table (the nearest
    that writes either), or the file is refused naming the file, line, model and key."""
    text = _table("[providers.p]", "https://p.example/v1" if provider_url else None,
                  "P_KEY" if provider_env else None)  # fmt: skip
    text += "\n" + _table('[[models]]\nname = "m"\nprovider = "p"',
                          "https://m.example/v1" if model_url else None,
                          "M_KEY" if model_env else None)  # fmt: skip
    path = tmp_path / "models.toml"
    path.write_text(text)
    flags = {"base_url": "https://f.example/v1", "api_key_env": "F_KEY"} if fallback else {}
    levels = [
        ("model", model_url, model_env, "https://m.example/v1", "M_KEY"),
        ("provider", provider_url, provider_env, "https://p.example/v1", "P_KEY"),
    ]
    nearest = next(((n, u, e, url, env) for n, u, e, url, env in levels if u or e), None)
    if nearest is not None and not (nearest[1] and nearest[2]):
        with pytest.raises(ModelsFileError) as info:
            load_models_file(path, fallback=flags)
        message = str(info.value)
        there = "base_url" if nearest[1] else "api_key_env"
        assert message.startswith(f"{path}:"), message  # the file and line
        assert f"`{there}` is set but" in message and "beside" in message
        assert ("model 'm'" if nearest[0] == "model" else "[providers.p]") in message
        assert "only to the base URL written beside it" in message
        return
    (spec,) = load_models_file(path, fallback=flags)
    if nearest is not None:
        assert (spec.base_url, spec.api_key_env) == (nearest[3], nearest[4])
    elif fallback:
        assert (spec.base_url, spec.api_key_env) == ("https://f.example/v1", "F_KEY")
    else:  # the defaults: OpenAI's key at OpenAI's URL
        assert (spec.base_url, spec.api_key_env) == ("https://api.openai.com/v1", "OPENAI_API_KEY")


def _judges(tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    metric, data = _files(tmp_path)
    (tmp_path / "models.toml").write_text(models)
    code = main(
        ["judges", "--metric", str(metric), "--data", str(data),
         "--models-file", str(tmp_path / "models.toml"), "--timeout", "20"]
    )  # fmt: skip
    return code, capsys.readouterr().err


class TestKeysReachTheirOwnHost:
    @pytest.fixture(autouse=True)
    def _keys(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SEAM_PROVIDER_KEY", KEY)
        monkeypatch.setenv("SEAM_MODEL_KEY", OTHER)

    @pytest.mark.parametrize(
        ("own", "code", "at_provider", "at_model"),
        [
            ("", 2, set(), set()),
            ('api_key_env = "SEAM_MODEL_KEY"\n', 0, {f"Bearer {KEY}"}, {f"Bearer {OTHER}"}),
            ('api_key_env = "none"\n', 0, {f"Bearer {KEY}"}, {None}),
        ],
        ids=["provider-key-model-url", "model-pair", "model-url-no-key"],
    )
    def test_each_key_reaches_its_own_host(
        self,
        tmp_path: Path,
        two: tuple[Provider, Provider],
        capsys: pytest.CaptureFixture[str],
        own: str,
        code: int,
        at_provider: set[str | None],
        at_model: set[str | None],
    ) -> None:
        """skynet-eval judges, a provider (host A, its key) and a model of it at its own
        base URL (host B), beside a sibling model on the provider: with no key of its own
        the model is refused before any call (exit 2, naming file, line, model and key;
        neither host hears anything); with its own variable, its key reaches B and the
        provider's reaches A only; with "none", B gets no key at all."""
        a, b = two
        got, err = _judges(
            tmp_path,
            f'[providers.p]\nbase_url = "{a.url}"\napi_key_env = "SEAM_PROVIDER_KEY"\n\n'
            f'[[models]]\nname = "m"\nprovider = "p"\nbase_url = "{b.url}"\n{own}'
            "price_input = 0\nprice_output = 0\n\n"
            '[[models]]\nname = "n"\nprovider = "p"\nprice_input = 0\nprice_output = 0\n',
            capsys,
        )
        assert got == code, err
        if code == 2:
            head = r"models\.toml:8: model 'm' \(\[\[models\]\] #1\): `base_url`"
            assert re.search(head, err), err
            assert "api_key_env" in err and KEY not in err
        assert a.auths() == at_provider and b.auths() == at_model

    @pytest.mark.parametrize("command", ["run", "judges"])
    def test_default_key_never_goes_to_another_host(
        self,
        command: str,
        tmp_path: Path,
        two: tuple[Provider, Provider],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--base-url of another server with no --api-key-env: OpenAI's key (the default
        variable) is not sent there; the run is refused naming the flag to set, and the
        host hears nothing. With --api-key-env it gets that key, and only that one."""
        a, _ = two
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        metric, data = _files(tmp_path)
        common = ["--metric", str(metric), "--data", str(data), "--timeout", "20"]
        if command == "run":
            argv = ["run", *common, "--metric-model", "m", "--metric-base-url", a.url]
            flag = "--metric-base-url"
        else:
            argv = ["judges", *common, "--models", "m", "--base-url", a.url]
            flag = "--base-url"
        argv += ["--price-input", "0", "--price-output", "0"] if command == "run" else []
        argv += ["--price", "m=0,0"] if command == "judges" else []
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{flag} names {a.url}" in err and "--api-key-env" in err, err
        assert a.seen == []
        assert main([*argv, "--api-key-env", "SEAM_MODEL_KEY"]) == 0, capsys.readouterr().err
        assert a.auths() == {f"Bearer {OTHER}"}

    def test_models_file_model_without_a_pair_and_flag_url(
        self,
        tmp_path: Path,
        two: tuple[Provider, Provider],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--models-file with --base-url and no --api-key-env: a model with no pair of its
        own would take OpenAI's key to that URL, so the command is refused; a file whose
        models all have their own pair runs, the flag unused."""
        a, b = two
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        metric, data = _files(tmp_path)
        models = tmp_path / "models.toml"
        argv = ["judges", "--metric", str(metric), "--data", str(data),
                "--models-file", str(models), "--base-url", a.url, "--timeout", "20"]  # fmt: skip
        models.write_text('[[models]]\nname = "m"\nprice_input = 0\nprice_output = 0\n')
        assert main(argv) == 2
        assert "--base-url names" in capsys.readouterr().err and a.seen == []
        models.write_text(
            f'[[models]]\nname = "m"\nbase_url = "{b.url}"\napi_key_env = "SEAM_MODEL_KEY"\n'
            "price_input = 0\nprice_output = 0\n"
        )
        assert main(argv) == 0, capsys.readouterr().err
        assert a.seen == [] and b.auths() == {f"Bearer {OTHER}"}

    def test_library_config_default_key_stays_with_openai(
        self, two: tuple[Provider, Provider], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """llm_client's own default: a ModelConfig for another server that names no
        api_key_env is refused when its client opens (naming model and URL), and that
        server hears nothing; named, the variable's key goes there; at OpenAI's URL the
        default variable is read as before."""
        a, _ = two
        monkeypatch.setenv("OPENAI_API_KEY", KEY)

        async def ask(config: ModelConfig) -> str:
            async with ModelClient(config) as client:
                return (await client.complete([{"role": "user", "content": "hi"}])).text

        with pytest.raises(ModelConfigError) as info:
            asyncio.run(ask(ModelConfig(model="m", base_url=a.url)))
        assert f"model 'm' at {a.url} names no `api_key_env`" in str(info.value)
        assert KEY not in str(info.value) and a.seen == []
        assert asyncio.run(
            ask(ModelConfig(model="m", base_url=a.url, api_key_env="SEAM_MODEL_KEY"))
        )
        assert a.auths() == {f"Bearer {OTHER}"}
        assert ModelConfig(model="m").api_key() == KEY

    def test_models_file_errors_never_show_the_key(self, tmp_path: Path) -> None:
        """The refusal names the variables, never a key's value."""
        path = tmp_path / "models.json"
        path.write_text(
            json.dumps(
                {
                    "providers": {
                        "p": {"base_url": "https://p/v1", "api_key_env": "SEAM_MODEL_KEY"}
                    },
                    "models": [{"name": "m", "provider": "p", "base_url": "https://m/v1"}],
                }
            )
        )
        with pytest.raises(ModelsFileError) as info:
            judges_from_flags(models_file=path)
        assert "models[0]" in str(info.value) and OTHER not in str(info.value)


# -- item 6: keys in successful replies ----------------------------------------------------

ECHO_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return {"reply": llm("Repeat my headers."), "list": [llm("Again.")]}
"""

ENV_METRIC = """
import os
from skynet import llm

def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    key = os.environ["SEAM_KEY"]
    return 1.0, {
        "feedback": f"{reply} | env {key} | cut {key[3:30]} | upper {key.upper()}",
        "scores": {f"named {key}": 1.0},
        "seen": output,
        "raw": [key.encode()],
    }
"""

SDK_PROGRAM = """
import os
import openai

client = openai.OpenAI(base_url=os.environ["SEAM_URL"], api_key=os.environ["SEAM_SDK_KEY"])

def run(artifact, input):
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return reply.choices[0].message.content + " / " + os.environ["SEAM_SDK_KEY"]
"""


def _leaks(key: str, text: str) -> bool:
    """The key, or a piece of it the redactor's rule 3 covers, in ``text`` (any case)."""
    low = text.replace(REDACTED, " ").lower()
    key = key.lower()
    return (
        any(key[i : i + FRAGMENT_MIN] in low for i in range(len(key) - FRAGMENT_MIN + 1))
        or json.dumps(key)[1:-1] in low
    )


def _page_data(html: str) -> str:
    """The HTML page's compressed data blocks, inflated as the browser does."""
    blocks = re.findall(r'<script type="[^"]+" id="report-[a-z]+">(.*?)</script>', html, re.S)
    texts = []
    for block in blocks:
        try:
            texts.append(zlib.decompress(base64.b64decode(block)).decode())
        except (ValueError, zlib.error):
            texts.append(block)
    return "\n".join(texts)


class TestKeysInSuccessfulReplies:
    def test_cli_run_leaves_echoed_and_read_keys_nowhere(
        self,
        tmp_path: Path,
        provider: Provider,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """skynet-eval run against a server that echoes the key in every normal reply, a
        program that returns the replies and a metric that also puts the key it reads
        from the environment (whole, cut, upper case, as bytes, in a named score) into
        its return: results file, JSON report, table report, HTML page and everything
        printed are free of it; the run itself succeeded."""
        provider.echo = True
        monkeypatch.setenv("SEAM_KEY", KEY)
        metric, data = _files(tmp_path, ENV_METRIC, rows=3)
        (tmp_path / "program.py").write_text(textwrap.dedent(ECHO_PROGRAM))
        out, page = tmp_path / "r.jsonl", tmp_path / "r.html"
        argv = ["run", "--metric", str(metric), "--program", str(tmp_path / "program.py"),
                "--artifact-text", "a", "--data", str(data), "--model", "m",
                "--metric-model", "m", "--base-url", provider.url, "--api-key-env", "SEAM_KEY",
                "--price-input", "0", "--price-output", "0", "--execution", "inline",
                "--program-execution", "inline", "--timeout", "20"]  # fmt: skip
        try:
            assert main([*argv, "--output", str(out), "--report", str(page), "--json"]) == 0
            printed = capsys.readouterr()
            assert main(argv) == 0
            table = capsys.readouterr()
        finally:
            provider.echo = False
        assert f"Bearer {KEY}" in provider.auths()  # the key was sent, and echoed
        rows = result_rows(out)  # past the header lines
        assert len(rows) == 3 and all(r["error"] is None for r in rows)
        assert "PASS. Your headers" in rows[0]["output"]["reply"]  # the reply is kept...
        assert REDACTED in rows[0]["feedback"]  # ...with the key taken out
        html = page.read_text()
        outputs = {
            "results file": out.read_text(),
            "results": repr(rows),
            "json report": printed.out,
            "stderr": printed.err + table.err,
            "table": table.out,
            "html page": html,
            "html data": _page_data(html),
        }
        for name, text in outputs.items():
            assert not _leaks(KEY, text), f"the key in the {name}: {text[:2000]}"

    def test_judges_output_and_spans_leave_it_out(
        self,
        tmp_path: Path,
        provider: Provider,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """skynet-eval judges against the echoing server (its table and --output JSON),
        and an Evaluator's OpenTelemetry spans (every attribute, every event) over the
        same replies: no trace of the key (the results they are made from are scrubbed;
        the outputs themselves carry no feedback today, and must not start to leak)."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        provider.echo = True
        monkeypatch.setenv("SEAM_KEY", KEY)
        metric, data = _files(tmp_path, ENV_METRIC)
        out = tmp_path / "judges.json"
        exporter = InMemorySpanExporter()
        tracing = TracerProvider()
        tracing.add_span_processor(SimpleSpanProcessor(exporter))
        model = ModelConfig(model="m", base_url=provider.url, api_key_env="SEAM_KEY",
                            price_input=0.0, price_output=0.0)  # fmt: skip

        async def traced() -> list[Result]:
            async with Evaluator(
                metric, execution="inline", models=Models(metric=model), timeout=20,
                tracer_provider=tracing,
            ) as ev:  # fmt: skip
                rows = [{"id": i, "input": {}, "output": f"o{i}"} for i in range(2)]
                return await ev.evaluate_many(None, rows)

        try:
            code = main(
                ["judges", "--metric", str(metric), "--data", str(data), "--models", "m",
                 "--base-url", provider.url, "--api-key-env", "SEAM_KEY", "--price", "m=0,0",
                 "--output", str(out), "--timeout", "20"]
            )  # fmt: skip
            printed = capsys.readouterr()
            results = asyncio.run(traced())
        finally:
            provider.echo = False
        assert code == 0, printed.err
        assert all(r.error is None and REDACTED in r.feedback for r in results)
        spans = exporter.get_finished_spans()
        assert spans
        shown = [
            json.dumps({k: str(v) for k, v in (s.attributes or {}).items()})
            + "".join(str(e.attributes) for e in s.events)
            for s in spans
        ]
        for name, text in {
            "judges table": printed.out + printed.err,
            "judges output": out.read_text(),
            "spans": "\n".join(shown),
        }.items():
            assert not _leaks(KEY, text), f"the key in the {name}: {text[:2000]}"

    def test_sdk_reply_and_sdk_key_kept_out(
        self, tmp_path: Path, provider: Provider, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A program calling its own openai client with its own key: the server's echo of
        that key in the reply, and the program appending the key to its output, leave
        no trace in the results (the engine learns the key from the routed call)."""
        provider.echo = True
        monkeypatch.setenv("SEAM_URL", provider.url)
        monkeypatch.setenv("SEAM_SDK_KEY", OTHER)
        (tmp_path / "program.py").write_text(textwrap.dedent(SDK_PROGRAM))
        metric = tmp_path / "metric.py"
        metric.write_text(
            'def score(input, output, expected=None):\n    return 1.0, {"feedback": str(output)}\n'
        )

        async def main_() -> list[Result]:
            async with Evaluator(
                metric, tmp_path / "program.py", execution="inline",
                program_execution="inline", timeout=20,
            ) as ev:  # fmt: skip
                return await ev.evaluate_many("a", [{"id": i, "input": {}} for i in range(2)])

        try:
            results = asyncio.run(main_())
        finally:
            provider.echo = False
        assert f"Bearer {OTHER}" in provider.auths()
        assert all(r.error is None and r.observation.llm_calls == 1 for r in results), results
        text = repr(results)
        assert "PASS. Your headers" in text and REDACTED in text
        assert not _leaks(OTHER, text), text


ECHOES: dict[str, Callable[[str], str]] = {
    "as sent": lambda k: k,
    "upper case": str.upper,
    "lower case": str.lower,
    "json": lambda k: json.dumps({"k": k}),
    "cut at the end": lambda k: k[: max(FRAGMENT_MIN, len(k) - 4)] + " (truncated)",
    "cut at the start": lambda k: "..." + k[min(4, len(k) - FRAGMENT_MIN) :],
    "inside a word": lambda k: f"xx{k}yy",
}


class TestRepliesThroughTheClient:
    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        key=st.text(
            st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"),
            min_size=FRAGMENT_MIN + 1,
            max_size=64,
        ),
        echo=st.sampled_from(sorted(ECHOES)),
    )
    def test_a_reply_echoing_the_key_never_holds_it(
        self, provider: Provider, key: str, echo: str
    ) -> None:
        """complete() and forward() against a server that writes the request's key into
        a successful reply, whole or cut, in any case, JSON-escaped or glued to a word:
        the text and the body handed on hold no piece of it a reader could use, and the
        rest of the reply is kept."""
        import os

        provider.echo = ECHOES[echo]
        os.environ["SEAM_HYPO_KEY"] = key
        config = ModelConfig(model="m", base_url=provider.url, api_key_env="SEAM_HYPO_KEY",
                             price_input=0.0, price_output=0.0, max_retries=0)  # fmt: skip

        async def both() -> tuple[str, bytes]:
            async with ModelClient(config) as client:
                text = (await client.complete([{"role": "user", "content": "hi"}])).text
                body = json.dumps({"model": "m", "messages": []}).encode()
                headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
                reply = await client.forward(
                    "POST", f"{provider.url}/chat/completions", headers, body, timeout=20
                )
                return text, reply.body

        try:
            text, body = asyncio.run(both())
        finally:
            provider.echo = False
            del os.environ["SEAM_HYPO_KEY"]
        assert text.startswith("PASS. Your key was")
        content = json.loads(body)["choices"][0]["message"]["content"]
        for shown in (text, content, body.decode()):
            assert not _leaks(key, shown), shown


keys = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"),
    min_size=SUBSTRING_MIN,
    max_size=64,
)
NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # the stub wants the Literal, not a str
words = st.text(st.characters(codec="utf-8", exclude_categories=NO_SURROGATES), max_size=40)


class TestSecretsRule:
    @settings(max_examples=300, deadline=None)
    @given(key=keys, before=words, after=words, form=st.sampled_from(["as is", "upper", "cut"]))
    def test_a_key_in_any_text_is_removed(
        self, key: str, before: str, after: str, form: str
    ) -> None:
        """Redactor.secrets removes a key of 8+ characters however it is written (as is,
        glued to any text; upper case; cut to 12 or more characters, standing apart), and
        its probe never misses a text it would change."""
        cut = key[: max(FRAGMENT_MIN, len(key) - 3)]
        piece = {"as is": key, "upper": key.upper(), "cut": f" {cut} "}[form]
        redactor = Redactor([key])
        text = f"{before}{piece}{after}"
        assert redactor.might_hold(text)
        clean = redactor.secrets(text).replace(REDACTED, " ").lower()
        assert piece.strip().lower() not in clean

    @settings(max_examples=300, deadline=None)
    @given(key=keys, text=words)
    def test_probe_is_sound(self, key: str, text: str) -> None:
        """A text the probe passes is one secrets() leaves as it is (the same object)."""
        redactor = Redactor([key])
        if not redactor.might_hold(text):
            assert redactor.secrets(text) is text

    def test_short_keys_and_credential_words_are_data(self) -> None:
        """secrets() leaves a short key (a word a reply may hold) and credential words
        (a reply about HTTP) alone: it is for data, not error texts."""
        redactor = Redactor(["test", KEY])
        text = "a test of Authorization: Bearer xyz and api_key=abc"
        assert redactor.secrets(text) is text

    def test_results_without_keys_are_the_same_objects(self) -> None:
        """The scrubber hands back the very list when no result holds a key, and when
        the run knows no key at all; a result holding one is rebuilt, the others kept."""
        results = [Result(i, 1.0, {}, "fine", None, Observation(), output=[i]) for i in range(50)]
        scrubber = ResultScrubber()
        assert scrubber.results(results) is results
        scrubber.know([KEY, "short"])
        assert scrubber.results(results) is results
        marked = [*results, Result(50, 1.0, {}, "x", None, Observation(), output={KEY: (KEY,)})]
        loop: list[Any] = [KEY]
        loop.append(loop)
        marked.append(Result(51, 1.0, {}, "y", None, Observation(), output=loop))
        clean = scrubber.results(marked)
        assert clean[:50] == results and all(a is b for a, b in zip(clean, results, strict=False))
        assert clean[50].output == {REDACTED: (REDACTED,)}
        assert clean[51].output[0] == REDACTED and KEY not in repr(clean)

    @pytest.mark.parametrize("offset", [0, 1, 2, 5])
    def test_a_key_in_bytes_alone_is_found(self, offset: int) -> None:
        """A key only in a bytes value (stored as base64, where its text cannot be seen),
        at any alignment: found and removed, the value still bytes."""
        scrubber = ResultScrubber()
        scrubber.know([KEY])
        value = b"x" * offset + KEY.encode() + b"!"
        (clean,) = scrubber.results([Result(1, 1.0, {}, "", None, Observation(), output=value)])
        assert clean.output == b"x" * offset + REDACTED.encode() + b"!"


# -- item 8: usage that cannot be true -----------------------------------------------------

impossible = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=MAX_TOKENS + 1, max_value=10**18),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 5), max_size=2),
)
fine = st.integers(min_value=0, max_value=MAX_TOKENS)

CHAT_FIELDS = ("prompt_tokens", "completion_tokens")


def _usage_with(field: str, value: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 5}
    if "." in field:
        outer, inner = field.split(".")
        usage[outer] = {inner: value}
    else:
        usage[field] = value
    return usage


async def _complete(url: str) -> Any:
    config = ModelConfig(model="m", base_url=url, api_key_env=None, price_input=1.0,
                         price_output=2.0, max_retries=0)  # fmt: skip
    async with ModelClient(config) as client:
        completion = await client.complete([{"role": "user", "content": "hi"}])
        stats = client.statistics() if hasattr(client, "statistics") else None
        return completion, stats


class TestImpossibleUsage:
    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        field=st.sampled_from([*CHAT_FIELDS, "prompt_tokens_details.cached_tokens",
                               "completion_tokens_details.reasoning_tokens"]),
        value=impossible,
    )  # fmt: skip
    def test_complete_reports_unmeasured(self, provider: Provider, field: str, value: Any) -> None:
        """complete() with a reply whose usage cannot be true: the call succeeds, its
        cost is None with a note naming the count, its tokens are 0, never a negative
        or absurd cost."""
        if value is None and "." in field:
            value = -1  # null cached/reasoning tokens mean none: a fine usage
        provider.usage = _usage_with(field, value)
        try:
            completion, _ = asyncio.run(_complete(provider.url))
        finally:
            provider.usage = dict(Provider.DEFAULT_USAGE)
        assert completion.text == "PASS"
        assert completion.cost_usd is None, completion
        assert "cannot be true" in (completion.cost_note or "")
        assert field.split(".")[-1] in (completion.cost_note or "")
        assert (completion.input_tokens, completion.output_tokens) == (0, 0)
        if isinstance(value, str):  # a string is not echoed: it may be anything, a key too
            assert "a string" in (completion.cost_note or "")
            assert repr(value) not in (completion.cost_note or "")

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(prompt=fine, completion_tokens=fine, cached=st.one_of(st.none(), fine))
    def test_complete_true_usage_is_priced(
        self, provider: Provider, prompt: int, completion_tokens: int, cached: int | None
    ) -> None:
        """Counts that can be true are priced as they are (cached tokens beyond the
        input cannot be true, and are unmeasured)."""
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens}
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
        provider.usage = usage
        try:
            completion, _ = asyncio.run(_complete(provider.url))
        finally:
            provider.usage = dict(Provider.DEFAULT_USAGE)
        if cached is not None and cached > prompt:
            assert completion.cost_usd is None and "cached tokens" in (completion.cost_note or "")
            return
        expected = (prompt * 1.0 + completion_tokens * 2.0) / 1e6
        assert completion.cost_usd == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert completion.cost_usd >= 0
        assert (completion.input_tokens, completion.output_tokens) == (prompt, completion_tokens)

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        shape=st.sampled_from(["chat/completions", "responses", "messages"]),
        which=st.integers(0, 1),
        value=impossible,
    )
    def test_forwarded_reports_unmeasured(
        self, provider: Provider, shape: str, which: int, value: Any
    ) -> None:
        """A forwarded call (an SDK's request) of each API shape: usage that cannot be
        true gives cost None with the reason and no usage reported, never a clamped $0;
        the body reaches the caller unchanged."""
        names = {"chat/completions": CHAT_FIELDS, "responses": ("input_tokens", "output_tokens"),
                 "messages": ("input_tokens", "output_tokens")}[shape]  # fmt: skip
        usage: dict[str, Any] = {names[0]: 10, names[1]: 5}
        usage[names[which]] = value
        provider.usage = usage

        async def forward() -> Any:
            config = ModelConfig(model="m", base_url=provider.url, api_key_env=None,
                                 price_input=1.0, price_output=2.0, max_retries=0)  # fmt: skip
            async with ModelClient(config) as client:
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                return await client.forward(
                    "POST", f"{provider.url}/{shape}", {"content-type": "application/json"},
                    body.encode(), timeout=20,
                )  # fmt: skip

        try:
            reply = asyncio.run(forward())
        finally:
            provider.usage = dict(Provider.DEFAULT_USAGE)
        assert reply.status == 200
        assert reply.cost_usd is None and not reply.usage_reported, reply
        assert "cannot be true" in (reply.cost_note or "") and names[which] in reply.cost_note
        assert json.loads(reply.body)["usage"] == usage

    @pytest.mark.parametrize("value", [-1_000_000, 10**12, 2.5, "12", True])
    def test_a_program_with_impossible_usage_is_not_the_metrics_fault(
        self, tmp_path: Path, provider: Provider, value: Any
    ) -> None:
        """A program whose model call reported impossible usage: its cost is unmeasured
        with the reason, and a metric that blends cost into its reward scores the
        example (the cost part 0, the note in its feedback), with no error."""
        (tmp_path / "program.py").write_text(
            "from skynet import llm\n\ndef run(artifact, input):\n    return llm('hi')\n"
        )
        (tmp_path / "metric.py").write_text(
            textwrap.dedent(
                """
                from skynet import reward

                SPEC = {"weights": {"accuracy": 0.5, "speed": 0.1, "cost": 0.4},
                        "accuracy": {}, "speed": {"reference": 2000},
                        "cost": {"reference": 0.01}}

                def score(input, output, expected=None):
                    return reward(SPEC, 1.0, "ok")
                """
            )
        )
        provider.usage = {"prompt_tokens": value, "completion_tokens": 5}
        model = ModelConfig(model="m", base_url=provider.url, api_key_env=None,
                            price_input=1.0, price_output=2.0, max_retries=0)  # fmt: skip

        async def run() -> list[Result]:
            async with Evaluator(
                tmp_path / "metric.py", tmp_path / "program.py", execution="inline",
                program_execution="inline", models=Models(program=model), timeout=20,
            ) as ev:  # fmt: skip
                return await ev.evaluate_many("a", [{"id": i, "input": {}} for i in range(3)])

        try:
            results = asyncio.run(run())
        finally:
            provider.usage = dict(Provider.DEFAULT_USAGE)
        for result in results:
            assert result.error is None, result.error
            assert result.observation.cost_usd is None
            assert any("cannot be true" in n for n in result.observation.notes)
            assert not any("--price" in n for n in result.observation.notes)  # not a price
            assert result.observation.llm_calls == 1
            assert "cost not measured" in result.feedback
            assert result.scores["cost"] == 0.0 and 0.5 <= result.score <= 0.6
