"""Bad input everywhere ends in a clear error of the documented kind, never anything else.

REWARD_SPEC values, CLI arguments, and model provider responses (status, headers and
body through the injectable transport; raw garbled bytes over real TCP on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_client import (
    Completion,
    HTTPRequest,
    HTTPResponse,
    LLMError,
    MockTransport,
    ModelClient,
    ModelConfig,
    Simulator,
    SimulatorConfig,
    TransportError,
)
from reward import RewardSpecError, parse_spec

# -- REWARD_SPEC -----------------------------------------------------------------------------

_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(),
    st.complex_numbers(),
)
_scalars = st.one_of(st.none(), _numbers, st.text(max_size=6), st.binary(max_size=4))
_anything = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(), st.none()), inner, max_size=4
        ),
    ),
    max_leaves=10,
)
_keys = st.sampled_from(["weights", "accuracy", "speed", "cost", "reference", "Weights", "", 1])


def _section(names: list[Any]) -> Any:
    return st.dictionaries(st.sampled_from(names), st.one_of(_numbers, _anything), max_size=4)


# Mostly the right shape with wrong details, so that the deep checks are reached.
_near_specs = st.fixed_dictionaries(
    {},
    optional={
        "weights": st.one_of(_section(["accuracy", "speed", "cost", "acc", 3]), _anything),
        "accuracy": st.one_of(_section(["reference", "ref"]), _anything),
        "speed": st.one_of(_section(["reference", "ms"]), _anything),
        "cost": st.one_of(_section(["reference", "usd"]), _anything),
        "extra": _anything,
    },
)

_fast = settings(max_examples=300, deadline=None)


class TestRewardSpecFuzz:
    @_fast
    @given(spec=st.one_of(_anything, _near_specs, st.dictionaries(_keys, _anything, max_size=5)))
    def test_only_reward_spec_error(self, spec: Any) -> None:
        """Any value as REWARD_SPEC parses, or raises RewardSpecError naming the key path
        (REWARD_SPEC...) and the problem; never another exception."""
        error: RewardSpecError | None = None
        try:
            parsed = parse_spec(spec)
        except RewardSpecError as exc:
            error = exc
        if error is not None:
            assert str(error).startswith("REWARD_SPEC"), str(error)
            assert error.problem and error.path.startswith("REWARD_SPEC")
            return
        weights = (parsed.accuracy_weight, parsed.speed_weight, parsed.cost_weight)
        assert all(math.isfinite(w) and w >= 0 for w in weights)
        assert math.isclose(sum(weights), 1.0)
        assert parsed.speed_reference_ms > 0 and parsed.cost_reference_usd > 0


# -- CLI arguments ---------------------------------------------------------------------------

GOOD_METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return (1.0 if output == (expected or {}).get("label") else 0.0), {"feedback": "ok"}
"""
JUDGE_METRIC = """
from skynet import llm
EXECUTION = "inline"

def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
"""
FILES = {
    "metric.py": GOOD_METRIC,
    "judge.py": JUDGE_METRIC,
    "broken.py": "def score(:\n",
    "raises.py": "raise RuntimeError('at import')\n",
    "noscore.py": "x = 1\n",
    "one_arg.py": "EXECUTION = 'inline'\ndef score(x):\n    return 1.0, {'feedback': ''}\n",
    "program.py": "EXECUTION = 'inline'\ndef run(artifact, input):\n    return input.get('q')\n",
    "data.jsonl": "".join(
        json.dumps({"id": i, "input": {"q": "a"}, "expected": {"label": "a"}, "output": "a"}) + "\n"
        for i in range(3)
    ),
    "flat.csv": "q,label,human\na,a,PASS\nb,a,FAIL\n",
    "broken.jsonl": '{"id": 1, "input": {}}\n{"id": 2, "inp\n',
    "dupes.jsonl": '{"id": 1, "input": {}, "output": 1}\n{"id": 1, "input": {}, "output": 1}\n',
    "empty.jsonl": "",
    "artifact.json": '{"prompt": "x"}',
    "broken.json": '{"prompt": ',
    "sim.json": json.dumps({"latency_ms": 0, "seed": 3}),
    "badsim.json": json.dumps({"host": "8.8.8.8", "error_500_rate": 2}),
    "notjson.json": "nope",
}


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    for name, text in FILES.items():
        (folder / name).write_text(text)
    (folder / "adir").mkdir()
    return folder


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with Simulator(SimulatorConfig()).running_in_thread() as sim:
        yield sim.base_url


@pytest.fixture
def fuzz_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key in the environment, so that the fuzz gets past the (separately tested)
    unset-variable error into the runs themselves."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fuzz-key")


_values = st.sampled_from(
    ["0", "-1", "1", "2", "0.5", "600", "600.5", "nan", "inf", "-inf", "1e309", "abc", "",
     "x,y", "q", "label", ",", "process", "thread", "async", "inline", "none", "m", "a,b",
     "m=1,2", "m=x", "--", "-", "\x00", "é", "--json"]
)  # fmt: skip


def _file_token(folder: Path) -> st.SearchStrategy[str]:
    names = [*FILES, "adir", "missing.py", "out.jsonl", "plot.png"]
    return st.sampled_from(names).map(lambda n: str(folder / n))


def _argv(command: str, flags: list[str], folder: Path, prefix: list[str]) -> Any:
    token = st.one_of(st.sampled_from(flags), _values, _file_token(folder), st.text(max_size=8))
    free = st.lists(token, max_size=8)
    pair = st.tuples(st.sampled_from(flags), st.one_of(_values, _file_token(folder))).map(list)
    structured = st.lists(pair, max_size=5).map(lambda ps: [t for p in ps for t in p])
    return st.one_of(free, structured).map(lambda rest: [command, *prefix, *rest])


RUN_FLAGS = [
    "--metric", "--program", "--artifact", "--artifact-text", "--data", "--input-cols",
    "--output-cols", "--output", "--resume", "--force", "--report", "--timeout", "--program-timeout", "--workers",
    "--concurrency", "--execution", "--program-execution", "--model", "--metric-model",
    "--reflection-model", "--base-url", "--metric-base-url", "--api-key-env", "--rpm", "--tpm",
    "--price-input", "--price-output", "--json", "--help",
]  # fmt: skip
CHECK_FLAGS = ["--data", "--input-cols", "--output-cols", "--timeout", "--json", "--help"]
JUDGES_FLAGS = [
    "--metric", "--data", "--models", "--reference", "--labels", "--program", "--artifact",
    "--api-key-env", "--rpm", "--tpm", "--price", "--timeout", "--simulator", "--output",
    "--input-cols", "--output-cols",
]  # fmt: skip

_cli_settings = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _call_main(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``main(argv)`` as the command line would see it: SystemExit gives the exit code."""
    from evaluator._cli import main

    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as outside pytest: a warning is printed
        try:
            code: Any = main(argv)
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
    out, err = capfd.readouterr()
    return code, out + err


def _check_outcome(argv: list[str], code: Any, text: str) -> None:
    assert code in (0, 1, 2), f"{argv}: exit code {code!r}\n{text[-2000:]}"
    assert "Traceback" not in text, f"{argv}:\n{text[-3000:]}"
    if code == 2:
        last = [line for line in text.splitlines() if "error" in line.lower()]
        assert last, f"{argv}: exit 2 without an error message:\n{text[-2000:]}"


class TestCliFuzz:
    @pytest.fixture(autouse=True)
    def _in_a_scratch_folder(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Relative paths the fuzz invents (``--output abc``) land in a scratch folder."""
        monkeypatch.chdir(tmp_path)

    def test_usage_error_is_returned_not_raised(self, capfd: pytest.CaptureFixture[str]) -> None:
        """``main(argv)`` returns 2 for a usage error (missing required flags), as
        documented, rather than raising SystemExit at its caller."""
        from evaluator._cli import main

        assert main(["run"]) == 2
        assert "--metric" in capfd.readouterr().err

    @pytest.mark.parametrize("command", ["run", "judges"])
    def test_model_key_variable_unset_is_a_usage_error(
        self, command: str, cli_files: Path, sim_url: str, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """A model whose API key variable is not set: exit 2 with one line naming the
        variable, no traceback."""
        metric = str(cli_files / ("metric.py" if command == "run" else "judge.py"))
        argv = [command, "--metric", metric, "--data", str(cli_files / "data.jsonl"),
                "--api-key-env", "NO_SUCH_KEY_VAR", "--base-url", sim_url]  # fmt: skip
        argv += ["--metric-model", "m"] if command == "run" else ["--models", "m"]
        code, text = _call_main(argv, capfd)
        assert code == 2, text[-2000:]
        assert "NO_SUCH_KEY_VAR" in text and "Traceback" not in text, text[-2000:]

    @_cli_settings
    @given(data=st.data())
    def test_run(
        self, data: st.DataObject, cli_files: Path, sim_url: str, capfd: Any, fuzz_key: None
    ) -> None:
        """Random and garbled ``run`` arguments end in 0, 1 or 2 with a message, never an
        exception or a traceback."""
        prefix = data.draw(
            st.sampled_from(
                [
                    [],
                    [
                        "--metric",
                        str(cli_files / "metric.py"),
                        "--data",
                        str(cli_files / "data.jsonl"),
                    ],
                ]
            )
        )
        argv = data.draw(_argv("run", RUN_FLAGS, cli_files, prefix))
        if "--base-url" not in argv:
            argv += ["--base-url", sim_url]  # a model call never leaves 127.0.0.1
        code, text = _call_main(argv, capfd)
        _check_outcome(argv, code, text)

    @_cli_settings
    @given(data=st.data())
    def test_check(self, data: st.DataObject, cli_files: Path, capfd: Any) -> None:
        """Random ``check`` arguments end in 0, 1 or 2, never a traceback."""
        metric = data.draw(_file_token(cli_files))
        argv = data.draw(_argv("check", CHECK_FLAGS, cli_files, [metric]))
        code, text = _call_main(argv, capfd)
        _check_outcome(argv, code, text)

    @_cli_settings
    @given(data=st.data())
    def test_judges(
        self, data: st.DataObject, cli_files: Path, sim_url: str, capfd: Any, fuzz_key: None
    ) -> None:
        """Random ``judges`` arguments (models served by a local simulator) end in 0, 1
        or 2, never a traceback."""
        prefix = data.draw(
            st.sampled_from(
                [
                    [],
                    ["--metric", str(cli_files / "judge.py"), "--data", str(cli_files / "data.jsonl"),
                     "--models", "j1,j2"],
                ]
            )
        )  # fmt: skip
        argv = data.draw(_argv("judges", JUDGES_FLAGS, cli_files, prefix))
        argv += ["--base-url", sim_url]
        code, text = _call_main(argv, capfd)
        _check_outcome(argv, code, text)


# -- provider responses ----------------------------------------------------------------------

_header_values = st.one_of(
    st.sampled_from(["1", "0", "-5", "nan", "inf", "1e309", "0.01", "20ms", "1m0s", "soon", ""]),
    st.text(max_size=10),
)
_headers = st.dictionaries(
    st.sampled_from(
        ["retry-after", "retry-after-ms", "x-ratelimit-reset-requests",
         "x-ratelimit-reset-tokens", "content-type", "x-other"]
    ),
    _header_values,
    max_size=3,
)  # fmt: skip
_json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_choice = st.fixed_dictionaries(
    {},
    optional={
        "message": st.one_of(
            _json_values, st.fixed_dictionaries({"content": _json_values, "role": _json_values})
        ),
        "finish_reason": _json_values,
        "index": _json_values,
    },
)
_bodies = st.one_of(
    st.binary(max_size=64),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(st.lists(_choice, max_size=2), _json_values),
            "usage": st.one_of(
                _json_values,
                st.fixed_dictionaries({}, optional={"prompt_tokens": _json_values, "completion_tokens": _json_values}),
            ),
            "model": _json_values,
            "error": st.one_of(_json_values, st.fixed_dictionaries({}, optional={"message": _json_values, "code": _json_values})),
        },
    ).map(lambda v: json.dumps(v).encode()),
)  # fmt: skip
_replies = st.one_of(
    st.tuples(st.sampled_from([200, 200, 200, 400, 401, 404, 408, 409, 422, 429, 500, 502, 503, 504, 599, 302, 204, 100]), _headers, _bodies),
    st.sampled_from(["connect", "timeout", "disconnected", "other"]),
)  # fmt: skip


def _transport(replies: list[Any]) -> MockTransport:
    queue = list(replies)

    def handle(request: HTTPRequest) -> HTTPResponse:
        reply = queue.pop(0) if queue else queue_last[0]
        if isinstance(reply, str):
            raise TransportError(reply, f"simulated {reply}", response_started=reply != "connect")  # type: ignore[arg-type]
        status, headers, body = reply
        return HTTPResponse(status, headers, body)

    queue_last = [replies[-1]]
    return MockTransport(handle)


async def _outcome(client: ModelClient) -> Completion | LLMError:
    """One call's Completion or LLMError; anything else (a hang past 5 s included) raises."""
    async with client:
        try:
            async with asyncio.timeout(5):
                return await client.complete([{"role": "user", "content": "hi"}])
        except LLMError as exc:
            return exc


class TestProviderFuzz:
    # Retries sleep for real (backoff, Retry-After): few of them, a short deadline.
    @settings(max_examples=80, deadline=None)
    @given(
        replies=st.lists(_replies, min_size=1, max_size=3), retries=st.sampled_from([0, 0, 0, 1, 2])
    )
    @pytest.mark.slow
    async def test_any_reply_ends_in_completion_or_llm_error(
        self, replies: list[Any], retries: int
    ) -> None:
        """Any sequence of statuses, headers, bodies and transport failures ends within
        the call's deadline in a Completion or an LLMError that names the model, never
        another exception and never a hang (tolerance: deadline 0.5 s, bound 5 s)."""
        config = ModelConfig(
            model="fuzz", base_url="http://127.0.0.1:9/v1", api_key_env=None,
            max_retries=retries, timeout=0.3, deadline=0.5, price_input=1.0, price_output=1.0,
        )  # fmt: skip
        reply = await _outcome(ModelClient(config, transport=_transport(replies), seed=0))
        if isinstance(reply, LLMError):
            assert "fuzz" in str(reply) and reply.model == "fuzz", str(reply)
        else:
            assert isinstance(reply.text, str) and reply.input_tokens >= 0
            assert reply.output_tokens >= 0

    @settings(max_examples=40, deadline=None)
    @given(raw=st.one_of(st.binary(max_size=200), st.builds(
        lambda status, head, body: b"HTTP/1.1 " + status + b"\r\n" + head + b"\r\n\r\n" + body,
        st.sampled_from([b"200 OK", b"500 X", b"abc", b"", b"200", b"99999 Big"]),
        st.sampled_from([b"Content-Length: 5", b"Content-Length: 999", b"Content-Length: -1",
                         b"Transfer-Encoding: chunked", b"Content-Type: application/json", b""]),
        st.binary(max_size=60),
    )))  # fmt: skip
    async def test_garbled_bytes_over_tcp(self, raw: bytes) -> None:
        """A server on 127.0.0.1 that answers with arbitrary bytes and closes: the real
        aiohttp transport ends in an LLMError (or a Completion), never another exception
        and never a hang (tolerance: timeout 1 s, bound 5 s)."""

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read(65536)
                writer.write(raw)
                await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = ModelConfig(
            model="raw", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=None,
            max_retries=0, timeout=1.0, deadline=3.0,
        )  # fmt: skip
        try:
            reply = await _outcome(ModelClient(config, seed=0))
            if isinstance(reply, LLMError):
                assert "raw" in str(reply), str(reply)
        finally:
            server.close()
            await server.wait_closed()
