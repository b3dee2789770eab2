"""The options structs: every flag checked once, a bad value one line naming the flag."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from evaluator import ConfigError
from evaluator._cli import main
from evaluator._cli._main import build_parser, flag_names
from evaluator._cli._options import (
    CheckOptions,
    JudgesOptions,
    ModelRequest,
    RunOptions,
    SimulatorOptions,
)

ROOT = Path(__file__).resolve().parents[3]
CLASSIFY = ROOT / "examples" / "classify"
METRICS = ROOT / "examples" / "metrics"
JUDGES = ROOT / "examples" / "judges"

CHECK = ["check", str(METRICS / "exact_match.py"), "--data", str(METRICS / "labels.jsonl")]
RUN = ["run", "--metric", str(CLASSIFY / "metric.py"), "--data", str(CLASSIFY / "data.jsonl")]
RUN_P = [*RUN, "--program", str(CLASSIFY / "program.py")]
JUDGE = [
    "judges",
    "--metric", str(METRICS / "judge.py"),
    "--data", str(JUDGES / "data.jsonl"),
    "--models", "judge-mini",
]  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def options(argv: list[str]) -> Any:
    """The options struct of ``argv``'s command, as main builds it."""
    args = parse(argv)
    return args.cli_command.options.from_args(args)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Paths a case may name: a folder, a file in a missing folder, a non-empty file,
    broken JSON."""
    full = tmp_path / "full.jsonl"
    full.write_text('{"example_id": "x"}\n')
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": ')
    return {
        "dir": str(tmp_path),
        "orphan": str(tmp_path / "no" / "file.out"),
        "full": str(full),
        "broken": str(broken),
    }


# (argv, what the one line says); {dir}, {orphan}, {full}, {broken} name files.
CASES = [
    # check
    ([*CHECK, "--timeout", "0"], "--timeout must be greater than 0 and at most 600 seconds, got 0"),
    ([*CHECK, "--timeout", "nan"], "--timeout must be a number of seconds, got nan"),
    (["check", "nope.py", "--data", "x"], "metric file 'nope.py' does not exist"),
    ([*CHECK[:2], "--data", "nope.jsonl"], "--data nope.jsonl: no such file"),
    # run: files
    ([*RUN, "--timeout", "900"], "--timeout must be greater than 0 and at most 600 seconds, got 900"),
    ([*RUN, "--program-timeout", "0"], "--program-timeout must be a number of seconds greater than 0, got 0"),
    ([*RUN, "--workers", "0"], "--workers must be positive, got 0"),
    ([*RUN, "--concurrency", "-3"], "--concurrency must be positive, got -3"),
    ([*RUN, "--metric", "missing.py"], "--metric: no such file 'missing.py'"),
    ([*RUN, "--metric", "{dir}"], "--metric: '{dir}' is a folder, not a file"),
    ([*RUN, "--program", "missing.py"], "--program: no such file 'missing.py'"),
    ([*RUN, "--artifact-text", "x"], "--artifact is used by a program: add --program FILE"),
    ([*RUN_P, "--artifact", "missing.txt"], "--artifact: no such file 'missing.txt'"),
    ([*RUN_P, "--artifact", "{broken}"], "--artifact {broken}:1: broken JSON"),
    ([*RUN, "--data", "nope.jsonl"], "--data nope.jsonl: no such file"),
    ([*RUN, "--data", "{dir}"], "--data {dir}: a folder, not a file"),
    ([*RUN, "--output", "{dir}"], "--output {dir}: is a directory; name a file in it"),
    ([*RUN, "--output", "{full}/r.jsonl"], "--output {full}/r.jsonl: {full} is a file, not a directory"),
    ([*RUN, "--output", "r\0.jsonl"], "--output 'r\\x00.jsonl': holds a NUL character"),
    ([*RUN, "--resume"], "--resume needs --output FILE (the results to go on from)"),
    ([*RUN, "--output", "{full}", "--force"], "--force only applies to a resume: add --resume"),
    ([*RUN, "--output", "{full}", "--report", "{full}"], "--report {full} is also --output"),
    ([*RUN, "--report", str(CLASSIFY / "data.jsonl")], "is one of the run's own files and would be overwritten"),
    ([*RUN, "--report", "{dir}"], "--report {dir}: is a directory"),
    ([*RUN, "--report", "{full}/r.html"], "--report {full}/r.html: {full} is a file, not a directory"),
    # run: models
    ([*RUN, "--model", ""], "--model must name a model, got ''"),
    ([*RUN, "--metric-model", " "], "--metric-model must name a model, got ' '"),
    ([*RUN, "--reflection-model", ""], "--reflection-model must name a model, got ''"),
    ([*RUN, "--base-url", "http://a/v1"], "--base-url needs a model: add --model, --metric-model or --reflection-model"),
    ([*RUN, "--metric-base-url", "http://a/v1"], "--metric-base-url needs a model"),
    ([*RUN, "--reflection-base-url", "http://a/v1"], "--reflection-base-url needs a model"),
    ([*RUN, "--model", "m", "--base-url", "ftp://a"], "--base-url must be a URL starting with http:// or https://, got 'ftp://a'"),
    ([*RUN, "--metric-model", "m", "--metric-base-url", "a"], "--metric-base-url must be a URL"),
    ([*RUN, "--model", "m", "--reflection-base-url", "a"], "--reflection-base-url must be a URL"),
    ([*RUN, "--model", "m", "--api-key-env", " "], "--api-key-env must name an environment variable"),
    ([*RUN, "--rpm", "5"], "--rpm needs a model"),
    ([*RUN, "--tpm", "5"], "--tpm needs a model"),
    ([*RUN, "--model", "m", "--rpm", "0"], "--rpm must be positive, got 0"),
    ([*RUN, "--model", "m", "--tpm", "-1"], "--tpm must be positive, got -1"),
    ([*RUN, "--price-input", "1"], "--price-input needs a model"),
    ([*RUN, "--price-output", "1"], "--price-output needs a model"),
    ([*RUN, "--hedge", "0.95"], "--hedge needs a model"),
    ([*RUN, "--model", "m", "--hedge", "0.95"], "--hedge needs --metric-model (it hedges the metric model's calls)"),
    ([*RUN, "--metric-model", "m", "--hedge", "1.5"], "--hedge must be a latency quantile, at least 0.5 and below 1 (0.95: the p95), got 1.5"),
    ([*RUN, "--model", "m", "--price-input", "-1"], "--price-input must be zero or more, got -1"),
    ([*RUN, "--model", "m", "--price-output", "inf"], "--price-output must be zero or more, got inf"),
    ([*RUN, "--model", "m", "--simulator", "nope.json"], "--simulator: no such file 'nope.json'"),
    ([*RUN, "--model", "m", "--simulator", "{broken}"], "--simulator {broken}: "),
    # judges
    ([*JUDGE, "--timeout", "601"], "--timeout must be greater than 0 and at most 600 seconds, got 601"),
    ([*JUDGE, "--metric", "nope.py"], "--metric: no such file 'nope.py'"),
    ([*JUDGE, "--program", "nope.py"], "--program: no such file 'nope.py'"),
    ([*JUDGE, "--artifact", "nope.txt"], "--artifact: no such file 'nope.txt'"),
    ([*JUDGE, "--data", "nope.jsonl"], "--data nope.jsonl: no such file"),
    ([*JUDGE, "--models", " , "], "--models needs at least one model name"),
    ([*JUDGE, "--models", "a,b,a"], "--models names ['a'] more than once"),
    ([*JUDGE, "--reference", "zzz"], "--reference 'zzz' is not one of the models ['judge-mini']"),
    ([*JUDGE, "--price", "other=1,2"], "--price names model 'other', which is not one of ['judge-mini']"),
    ([*JUDGE, "--price", "judge-mini=-1,2"], "--price judge-mini: prices must be zero or more, got -1,2"),
    ([*JUDGE, "--base-url", "localhost:8000"], "--base-url must be a URL starting with http:// or https://"),
    ([*JUDGE, "--api-key-env", ""], "--api-key-env must name an environment variable"),
    ([*JUDGE, "--rpm", "0"], "--rpm must be positive, got 0"),
    ([*JUDGE, "--tpm", "nan"], "--tpm must be positive, got nan"),
    ([*JUDGE, "--simulator", "nope.json"], "--simulator: no such file 'nope.json'"),
    ([*JUDGE, "--output", "{dir}"], "--output {dir} is a folder: name a file"),
    ([*JUDGE, "--plot", "{orphan}"], "--plot {orphan}: no such folder"),
    # simulator: llm_client's SimulatorConfig checks these, naming its own fields
    (["simulator", "--drop-rate", "2"], "`drop_rate` must be between 0 and 1, got 2.0"),
    (["simulator", "--port", "70000"], "`port` must be between 0 and 65535, got 70000"),
    (["simulator", "--host", "10.1.2.3"], "`host` must be a loopback address"),
    (["simulator", "--latency-ms", "-1"], "`latency_ms` must be zero or more, got -1.0"),
    (["simulator", "--window", "0"], "`window_s` must be positive, got 0.0"),
    (["simulator", "--tail-share", "2"], "`tail_share` must be between 0 and 1, got 2.0"),
    (["simulator", "--slow-rate", "0.6", "--drop-rate", "0.6"], "the fault rates add up to 1.2"),
]  # fmt: skip


def _fill(argv: list[str], message: str, files: dict[str, str]) -> tuple[list[str], str]:
    return [a.format(**files) for a in argv], message.format(**files)


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(c[0][-2:]) for c in CASES])
def test_bad_value_is_one_line_and_exit_2(
    argv: list[str], message: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each flag's bad value: exit 2, one line `skynet-eval CMD: error: ...` naming the
    flag (the simulator's: its config field), no traceback."""
    argv, message = _fill(argv, message, files)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"skynet-eval {argv[0]}: error: "), err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [case for case in CASES if case[0][0] != "simulator"],
    ids=[" ".join(c[0][-2:]) for c in CASES if c[0][0] != "simulator"],
)
def test_an_option_error_names_a_flag_of_its_command(
    argv: list[str], message: str, files: dict[str, str]
) -> None:
    """The options structs raise ConfigError; one that carries an option carries the
    dest of a flag of that command, and rendered by that flag reads as printed."""
    argv, message = _fill(argv, message, files)
    args = parse(argv)
    with pytest.raises(ConfigError) as caught:
        args.cli_command.options.from_args(args)
    exc = caught.value
    if exc.option is not None:
        assert exc.option in args.cli_flags
        assert message in exc.render(args.cli_flags[exc.option])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*RUN, "--execution", "gpu"], "argument --execution: invalid choice: 'gpu'"),
        ([*RUN, "--program-execution", "gpu"], "argument --program-execution: invalid choice"),
        ([*RUN, "--workers", "two"], "argument --workers: invalid int value: 'two'"),
        ([*RUN, "--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
        ([*RUN_P, "--artifact", "a", "--artifact-text", "b"], "not allowed with argument --artifact"),
        ([*RUN, "--input-cols", ","], "argument --input-cols: expected one or more column names"),
        ([*CHECK, "--output-cols", " "], "argument --output-cols: expected one or more column names"),
        ([*JUDGE, "--price", "a=1"], "expected MODEL=INPUT,OUTPUT"),
        ([*JUDGE, "--reference", "a", "--labels", "b"], "not allowed with argument --reference"),
        (["simulator", "--model", ":x=1"], "--model needs a name"),
        (["simulator", "--model", "a:speed=1"], "expected NAME:key=value,... with keys latency_ms"),
        (["simulator", "--model", "a:noise=high"], "noise must be a number, got 'high'"),
        (["run"], "the following arguments are required: --metric, --data"),
    ],
)  # fmt: skip
def test_malformed_word_is_argparses_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A word argparse cannot read: exit 2, the usage and the error naming the flag."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: skynet-eval") and message in err, err


class TestCheckOptions:
    def test_fields(self) -> None:
        """check's struct holds the metric, the dataset, the timeout and --json."""
        got = options([*CHECK, "--timeout", "5", "--json", "--input-cols", "question"])
        assert isinstance(got, CheckOptions)
        assert got.metric == CHECK[1] and got.data.path == CHECK[3]
        assert got.timeout == 5.0 and got.json is True
        assert got.data.input_cols == ("question",) and got.data.output_cols is None


class TestRunOptions:
    def test_frozen_and_complete(self) -> None:
        """run's struct holds every flag's value, checked, and cannot be changed after."""
        got = options(
            [*RUN_P, "--artifact-text", "be brief", "--timeout", "9", "--program-timeout", "700",
             "--workers", "3", "--concurrency", "20", "--execution", "thread",
             "--program-execution", "async", "--json"]
        )  # fmt: skip
        assert isinstance(got, RunOptions)
        assert (got.artifact, got.timeout, got.program_timeout) == ("be brief", 9.0, 700.0)
        assert (got.workers, got.concurrency) == (3, 20)
        assert (got.execution, got.program_execution, got.json) == ("thread", "async", True)
        assert got.serving.models == () and not got.resume
        assert got.output is not None and re.search(r"-metric(-\d+)?\.jsonl$", got.output)
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.timeout = 1  # type: ignore[misc]

    def test_base_urls_fall_back_stage_by_stage(self) -> None:
        """The metric model's base URL defaults to the reflection model's, that one's to
        the program model's; prices and limits go with every model."""
        got = options(
            [*RUN, "--model", "p", "--metric-model", "j", "--reflection-model", "r",
             "--base-url", "http://a/v1", "--reflection-base-url", "http://b/v1",
             "--price-input", "1", "--price-output", "2", "--rpm", "60"]
        )  # fmt: skip
        assert got.serving.models == (
            ModelRequest("program", "p", "http://a/v1", 1.0, 2.0),
            ModelRequest("metric", "j", "http://b/v1", 1.0, 2.0),
            ModelRequest("reflection", "r", "http://b/v1", 1.0, 2.0),
        )
        assert got.serving.rpm == 60.0 and got.serving.tpm is None
        alone = options([*RUN, "--metric-model", "j", "--base-url", "http://a/v1"])
        assert alone.serving.models == (ModelRequest("metric", "j", "http://a/v1", None, None),)

    def test_key_variable_none(self) -> None:
        """--api-key-env none (any case) means a server that takes no key."""
        assert options([*RUN, "--model", "m", "--api-key-env", "NONE"]).serving.api_key_env is None
        assert options([*RUN, "--model", "m"]).serving.api_key_env == "OPENAI_API_KEY"

    def test_artifact_file(self, tmp_path: Path) -> None:
        """--artifact: a .json file is parsed, any other file is text as written."""
        (tmp_path / "a.json").write_text('{"prompt": "hi"}')
        (tmp_path / "a.txt").write_text("hi\n")
        parsed = options([*RUN_P, "--artifact", str(tmp_path / "a.json")])
        assert parsed.artifact == {"prompt": "hi"}
        assert options([*RUN_P, "--artifact", str(tmp_path / "a.txt")]).artifact == "hi\n"

    def test_simulator_file_is_read(self) -> None:
        """--simulator FILE is read into the SimulatorConfig the serving step starts."""
        got = options(
            [*RUN, "--metric-model", "judge-mini", "--simulator", str(JUDGES / "simulator.json")]
        )
        assert got.serving.simulator is not None and "judge-mini" in got.serving.simulator.models

    def test_output_in_a_missing_folder(self, tmp_path: Path) -> None:
        """--output in folders that do not exist yet is fine: the run creates them."""
        out = tmp_path / "runs" / "today" / "r.jsonl"
        got = options([*RUN, "--output", str(out)])
        assert got.output == str(out) and not out.parent.exists()

    def test_output_that_holds_results_is_looked_at_by_the_run(self, tmp_path: Path) -> None:
        """The flags do not read --output: the run does, with the dataset's ids (it may
        be a dataset, another run's file, a file to resume)."""
        out = tmp_path / "r.jsonl"
        out.write_text('{"example_id": 1}\n')
        assert options([*RUN, "--output", str(out)]).output == str(out)

    def test_force_and_report(self, tmp_path: Path) -> None:
        """--resume --force and --report are carried to the run."""
        out, page = tmp_path / "r.jsonl", tmp_path / "page.html"
        got = options([*RUN, "--output", str(out), "--resume", "--force", "--report", str(page)])
        assert got.force and got.resume and got.report == str(page)

    def test_resume_on_results(self, tmp_path: Path) -> None:
        """--output holding results is fine with --resume."""
        out = tmp_path / "r.jsonl"
        out.write_text('{"example_id": 1}\n')
        got = options([*RUN, "--output", str(out), "--resume"])
        assert got.output == str(out) and got.resume


class TestJudgesOptions:
    @pytest.fixture(autouse=True)
    def _key(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    def test_reference_defaults_to_the_first_model(self) -> None:
        """Agreement is against the first model unless --reference or --labels says."""
        assert options([*JUDGE[:-1], "a,b"]).reference == "a"
        assert options([*JUDGE[:-1], "a,b", "--reference", "b"]).reference == "b"
        labelled = options([*JUDGE[:-1], "a,b", "--labels", "human"])
        assert labelled.reference is None and labelled.labels == "human"

    def test_models_with_their_prices(self) -> None:
        """Each model is one request at --base-url, with its own --price when given."""
        flags = ["--base-url", "http://h/v1", "--api-key-env", "OPENAI_API_KEY"]
        got = options([*JUDGE[:-1], "a, b", *flags, "--price", "b=1,2"])
        assert isinstance(got, JudgesOptions)
        assert [(j.label, j.model, j.base_url) for j in got.judges] == [
            ("a", "a", "http://h/v1"),
            ("b", "b", "http://h/v1"),
        ]
        assert [(j.price_input, j.price_output) for j in got.judges] == [(None, None), (1.0, 2.0)]


class TestSimulatorOptions:
    def test_config_from_flags(self) -> None:
        """The simulator's flags become one SimulatorConfig."""
        got = options(
            ["simulator", "--port", "0", "--seed", "4", "--window", "5", "--drop-rate", "0.1",
             "--error-500-rate", "0.2", "--model", "a:latency_ms=3,reasoning_tokens=7",
             "--api-key", "k"]
        )  # fmt: skip
        assert isinstance(got, SimulatorOptions)
        config = got.config
        assert (config.port, config.seed, config.window_s) == (0, 4, 5.0)
        assert (config.drop_rate, config.error_500_rate, config.api_key) == (0.1, 0.2, "k")
        assert config.models["a"].latency_ms == 3.0 and config.models["a"].reasoning_tokens == 7


def test_every_flag_has_a_long_name() -> None:
    """Each command's flags map their dest to a --flag, so any option renders."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        flags = flag_names(sub)
        dests = {a.dest for a in sub._actions if a.option_strings}
        assert dests == set(flags), name
    run = flag_names(subparsers.choices["run"])
    assert run["program_timeout"] == "--program-timeout" and run["api_key_env"] == "--api-key-env"
    assert flag_names(subparsers.choices["simulator"])["models"] == "--model"
