"""The flags of every command, and the one frozen options struct each is read into.

argparse turns words into values (a malformed word is its own usage message); each
struct's ``from_args`` then checks every value once, and the command receives the
struct, never the ``argparse.Namespace``. A bad value raises ConfigError: with
``option`` set to the flag's ``dest`` when the problem reads on from the flag's name
(``_main`` renders it ``--flag``), else as a whole message naming the flag. A flag's
``dest`` is the name of the API option it feeds (``--program-timeout`` ->
``program_timeout``), so an engine ConfigError about that option renders as the flag
too.

Cheap to import, because ``--help`` imports it: user files are read, and llm_client
imported, only inside ``from_args``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from evaluator import ConfigError
from evaluator._call._kinds import EXECUTIONS
from evaluator._options import MAX_TIMEOUT, validate_ray_address, validate_timeout

if TYPE_CHECKING:
    from evaluator import Budget, Example
    from evaluator._data._dataset import DatasetRead, Selection
    from evaluator._judges import JudgeSpec
    from llm_client import SimulatorConfig

__all__ = [
    "CheckOptions",
    "CommandOptions",
    "DataOptions",
    "JudgesOptions",
    "ModelRequest",
    "ReportOptions",
    "RunOptions",
    "ServingOptions",
    "SimulatorOptions",
]

DEFAULT_TIMEOUT = 60.0
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
OPENAI_BASE_URL = "https://api.openai.com/v1"
_NEEDS_A_MODEL = "add --model, --metric-model or --reflection-model"


class CommandOptions(Protocol):
    """What ``_main`` needs of a command's options struct."""

    HELP: ClassVar[str]
    DESCRIPTION: ClassVar[str]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Declare the command's flags."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        """The struct, every value checked; raises ConfigError."""


# -- argparse types: a malformed word is argparse's own usage error ----------------------


def columns(text: str) -> list[str]:
    """``a,b`` or ``a`` -> a list of column names (repeatable flags are appended)."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected one or more column names, e.g. question,context")
    return names


def price(text: str) -> tuple[str, float, float]:
    """``MODEL=INPUT,OUTPUT`` (USD per million tokens) -> (model, input, output)."""
    model, sep, rest = text.partition("=")
    parts = rest.split(",")
    try:
        if not sep or len(parts) != 2:
            raise ValueError
        return model.strip(), float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected MODEL=INPUT,OUTPUT in USD per million tokens, "
            f"e.g. judge-mini=0.15,0.6; got {text!r}"
        ) from None


_SIMULATED_MODEL_FIELDS: dict[str, type[float] | type[int]] = {
    "latency_ms": float,
    "jitter_ms": float,
    "noise": float,
    "flip_rate": float,
    "reasoning_tokens": int,
}


def simulated_model(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:latency_ms=50,noise=0.1`` -> (name, settings)."""
    name, _, rest = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"--model needs a name, got {text!r}")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _SIMULATED_MODEL_FIELDS:
            raise argparse.ArgumentTypeError(
                f"--model {text!r}: expected NAME:key=value,... with keys "
                f"{', '.join(_SIMULATED_MODEL_FIELDS)}; got {item!r}"
            )
        try:
            settings[key] = _SIMULATED_MODEL_FIELDS[key](value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--model {text!r}: {key} must be a number, got {value!r}"
            ) from None
    return name, settings


# -- checks shared by the commands ----------------------------------------------------


def _positive(value: float | None, dest: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"must be positive, got {value:g}", option=dest, value=value)


def _zero_or_more(value: float | None, dest: str) -> None:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"must be zero or more, got {value:g}", option=dest, value=value)


def _file(path: str | None, flag: str) -> str | None:
    """``path`` when it names an existing file."""
    if path is None or Path(path).is_file():
        return path
    if Path(path).is_dir():
        raise ConfigError(f"{flag}: {path!r} is a folder, not a file")
    raise ConfigError(f"{flag}: no such file {path!r}")


def _new_file(path: str | None, dest: str) -> str | None:
    """``path`` when a file can be written there (``check_output_path``: a regular file or
    none yet, not a folder, a device or a pipe), in a folder that exists."""
    if path is None:
        return None
    if "\0" not in path and Path(path).is_dir():
        raise ConfigError(f"{path} is a folder: name a file", option=dest, value=path)
    from evaluator._outpath import check_output_path

    check_output_path(path, option=dest)
    parent = Path(path).parent
    if not parent.is_dir():
        raise ConfigError(f"{path}: no such folder {str(parent)!r}", option=dest, value=path)
    return path


def _url(value: str | None, dest: str) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise ConfigError(
            f"must be a URL starting with http:// or https://, got {value!r}",
            option=dest,
            value=value,
        )
    return value


def _model_name(value: str | None, dest: str) -> str | None:
    if value is not None and not value.strip():
        raise ConfigError(f"must name a model, got {value!r}", option=dest, value=value)
    return value


def _key_env(value: str | None) -> str | None:
    """``--api-key-env``: a variable name, or ``none`` for a server that takes no key."""
    if value is None or value.lower() == "none":
        return None
    if not value.strip():
        raise ConfigError(
            f"must name an environment variable (or be 'none' for a server that takes no "
            f"key), got {value!r}",
            option="api_key_env",
            value=value,
        )
    return value


def _artifact(path: str | None, text: str | None) -> Any:
    """The artifact: ``--artifact-text``, or ``--artifact FILE`` (.json parsed, else text)."""
    if text is not None:
        return text
    if _file(path, "--artifact") is None:
        return None
    import json

    file = Path(str(path))
    content = file.read_text(encoding="utf-8")
    if file.suffix.lower() != ".json":
        return content
    try:
        return json.loads(content)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--artifact {file}:{exc.lineno}: broken JSON ({exc.msg}); fix it, or give "
            "the file another extension to pass it as text"
        ) from None


def _simulator_config(path: str | None) -> SimulatorConfig | None:
    """The ``--simulator`` file: a JSON ``llm_client.SimulatorConfig``."""
    if _file(path, "--simulator") is None:
        return None
    import msgspec

    from llm_client import SimulatorConfig

    try:
        return msgspec.json.decode(Path(str(path)).read_bytes(), type=SimulatorConfig)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ConfigError(f"--simulator {path}: {exc}") from None


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", required=True, metavar="FILE", help="dataset: .jsonl, .json or .csv"
    )
    parser.add_argument(
        "--input-cols",
        type=columns,
        action="extend",
        metavar="COLS",
        help="flat rows: the input column(s), comma separated or repeated",
    )
    parser.add_argument(
        "--output-cols",
        type=columns,
        action="extend",
        metavar="COLS",
        help="flat rows: the expected-output column(s); `expected` is keyed by these names",
    )
    parser.add_argument(
        "--id-col",
        metavar="COL",
        help="flat rows: the column holding each row's id (default: id; else the row's position)",
    )
    few = parser.add_argument_group("try a few examples first (one of)")
    which = few.add_mutually_exclusive_group()
    which.add_argument("--limit", type=int, metavar="N", help="only the first N examples")
    which.add_argument(
        "--sample", type=int, metavar="N", help="N examples drawn at random (see --seed)"
    )
    which.add_argument(
        "--ids",
        type=columns,
        action="extend",
        metavar="IDS",
        help="only the examples with these ids, comma separated or repeated",
    )
    few.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="the seed of --sample (default 0): same seed, same rows",
    )


def _add_metric_timeout_argument(parser: Any) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"metric timeout, s (default 60, max {MAX_TIMEOUT:g})",
    )


def _add_program_arguments(parser: argparse.ArgumentParser) -> None:
    """``--program`` and its artifact (``--artifact FILE`` or ``--artifact-text``)."""
    parser.add_argument("--program", metavar="FILE", help="program file (`run(artifact, input)`)")
    artifact = parser.add_mutually_exclusive_group()
    artifact.add_argument(
        "--artifact", metavar="FILE", help="the candidate artifact: .json is parsed, else text"
    )
    artifact.add_argument("--artifact-text", metavar="TEXT", help="the artifact as text")


def _add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how long the metric and the program run (``run`` and ``check``)."""
    _add_metric_timeout_argument(parser)
    parser.add_argument("--program-timeout", type=float, help="program timeout, s (default 600)")
    parser.add_argument(
        "--execution",
        choices=EXECUTIONS,
        help="where the metric runs (default: the file's EXECUTION, else by its kind)",
    )
    parser.add_argument("--program-execution", choices=EXECUTIONS, help="where the program runs")


def _add_model_arguments(models: Any) -> None:
    """The models the program and the metric call (``run`` and ``check``)."""
    models.add_argument("--model", help="the program model")
    models.add_argument("--metric-model", help="the metric (judge) model")
    models.add_argument("--reflection-model", help="the reflection model")
    models.add_argument("--base-url", help="OpenAI-compatible base URL of --model")
    models.add_argument("--metric-base-url", help="base URL of --metric-model")
    models.add_argument("--reflection-base-url", help="base URL of --reflection-model")
    models.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key of every model given (default "
        "OPENAI_API_KEY, sent only to OpenAI's base URL); 'none' for a server without keys",
    )
    models.add_argument("--rpm", type=float, help="requests per minute per model")
    models.add_argument("--tpm", type=float, help="tokens per minute per model")
    models.add_argument("--price-input", type=float, help="USD per 1M input tokens (override)")
    models.add_argument("--price-output", type=float, help="USD per 1M output tokens (override)")
    models.add_argument(
        "--hedge",
        type=float,
        metavar="Q",
        help="send a second copy of a --metric-model call that has waited past this quantile "
        "of its recent latencies (0.95: the p95), within the rate budget (default: off)",
    )
    _add_simulator_argument(models)


def _program_timeout(args: argparse.Namespace) -> float | None:
    if args.program_timeout is None:
        return None
    return validate_timeout(args.program_timeout, "program_timeout", upper=None)


def _program_and_artifact(args: argparse.Namespace) -> tuple[str | None, Any]:
    program = _file(args.program, "--program")
    if program is None and (args.artifact is not None or args.artifact_text is not None):
        raise ConfigError("--artifact is used by a program: add --program FILE")
    return program, _artifact(args.artifact, args.artifact_text)


def _add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        help="read the flags from a TOML file: every flag is a key (metric-model = "
        '"judge-mini"), relative paths are the file\'s; flags given here win',
    )


def _add_simulator_argument(parser: Any) -> None:
    parser.add_argument(
        "--simulator",
        metavar="CONFIG",
        help="serve every model from a local simulator on 127.0.0.1 (a JSON SimulatorConfig), "
        "and every model call the program or metric makes with its own SDK (openai, litellm, "
        "dspy), whatever base URL it names; no key, no network",
    )


# -- shared structs ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DataOptions:
    """``--data`` and, for flat rows, ``--input-cols`` / ``--output-cols``."""

    path: str
    input_cols: tuple[str, ...] | None = None
    output_cols: tuple[str, ...] | None = None
    selection: Selection | None = None
    id_col: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DataOptions:
        if not Path(args.data).is_file():
            what = "a folder, not a file" if Path(args.data).is_dir() else "no such file"
            raise ConfigError(f"--data {args.data}: {what}")
        return cls(
            path=args.data,
            input_cols=tuple(args.input_cols) if args.input_cols else None,
            output_cols=tuple(args.output_cols) if args.output_cols else None,
            selection=_selection(args),
            id_col=_id_col(args),
        )

    def examples(self) -> Iterator[Example]:
        """The dataset's examples (those of the selection), read as they are consumed."""
        from evaluator import load_examples

        def every() -> Iterator[Example]:
            return load_examples(
                self.path,
                input_cols=self.input_cols,
                output_cols=self.output_cols,
                id_col=self.id_col,
            )

        return every() if self.selection is None else self.selection.select(every)

    def read(self) -> DatasetRead:
        """The dataset read once: the examples taken (those of the selection) and the
        file's SHA-256, from the same read."""
        from evaluator._data._dataset import read_dataset

        return read_dataset(
            self.path,
            input_cols=self.input_cols,
            output_cols=self.output_cols,
            id_col=self.id_col,
            selection=self.selection,
        )


def _id_col(args: argparse.Namespace) -> str | None:
    if args.id_col is None:
        return None
    if not args.id_col.strip():
        raise ConfigError("must name a column, got ''", option="id_col", value=args.id_col)
    if not args.input_cols:
        raise ConfigError(
            "names the id column of flat rows: add --input-cols (a canonical row's id is its 'id')",
            option="id_col",
        )
    return str(args.id_col)


def _selection(args: argparse.Namespace) -> Selection | None:
    """``--limit``, ``--sample``/``--seed`` or ``--ids``; None for every example."""
    from evaluator._data._dataset import Selection

    if args.seed is not None and args.sample is None:
        raise ConfigError("is the seed of --sample: add --sample N", option="seed")
    for dest in ("limit", "sample"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise ConfigError(f"must be 1 or more, got {value}", option=dest, value=value)
    if args.limit is None and args.sample is None and not args.ids:
        return None
    return Selection(
        limit=args.limit,
        sample=args.sample,
        seed=None if args.sample is None else (args.seed or 0),
        ids=list(dict.fromkeys(args.ids)) if args.ids else None,
    )


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model a command calls, as the flags describe it; ``role`` is its key (the
    stage of ``run``, the model's own name in ``judges``). ``base_url`` None: the
    ModelConfig default."""

    role: str
    model: str
    base_url: str | None = None
    price_input: float | None = None
    price_output: float | None = None
    #: The key variable of a litellm-style name's provider (``groq/...``: GROQ_API_KEY),
    #: used unless --api-key-env names another; "" for a local server without a key.
    key_env: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingOptions:
    """What the serving step (``_serving.Serving``) needs: the models, where their key
    is, their limits, and the ``--simulator`` that serves them all instead."""

    models: tuple[ModelRequest, ...] = ()
    api_key_env: str | None = DEFAULT_KEY_ENV
    #: True when ``--api-key-env`` was not given: the variable is then OpenAI's, and its
    #: key goes to OpenAI's base URL only (a model at another is refused by the serving step).
    default_key_env: bool = False
    rpm: float | None = None
    tpm: float | None = None
    hedge: float | None = None  # the metric model's (``ModelConfig.hedge``)
    simulator: SimulatorConfig | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, models: Sequence[ModelRequest]) -> Self:
        _positive(args.rpm, "rpm")
        _positive(args.tpm, "tpm")
        _hedge_quantile(args.hedge, models)
        for request in models:
            _zero_or_more(request.price_input, "price_input")
            _zero_or_more(request.price_output, "price_output")
        return cls(
            models=tuple(models),
            api_key_env=_key_env(DEFAULT_KEY_ENV if args.api_key_env is None else args.api_key_env),
            default_key_env=args.api_key_env is None,
            rpm=args.rpm,
            tpm=args.tpm,
            hedge=args.hedge,
            simulator=_simulator_config(args.simulator),
        )


def _hedge_quantile(value: float | None, models: Sequence[ModelRequest]) -> None:
    if value is None:
        return
    if not (math.isfinite(value) and 0.5 <= value < 1):
        raise ConfigError(
            f"must be a latency quantile, at least 0.5 and below 1 (0.95: the p95), got {value:g}",
            option="hedge",
            value=value,
        )
    if not any(request.role == "metric" for request in models):
        raise ConfigError(
            "needs --metric-model (it hedges the metric model's calls)", option="hedge"
        )


# -- cache ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheOptions:
    """``skynet-eval cache stats|clear DIR``."""

    HELP: ClassVar[str] = "look after a result cache: its size, or empty it"
    DESCRIPTION: ClassVar[str] = (
        "stats: the entries, size and age of the result cache in DIR (as made by "
        "`run --cache DIR`); clear: delete its entries and give the space back."
    )

    action: str
    directory: str
    json: bool = False

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("stats", "clear"), help="what to do")
        parser.add_argument("directory", metavar="DIR", help="the cache directory")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        from evaluator._cache import FILE_NAME as CACHE_FILE
        from evaluator._cache import check_directory

        directory = check_directory(args.directory, option="directory")
        if not (directory / CACHE_FILE).is_file():
            raise ConfigError(
                f"{args.directory} holds no result cache (looked for "
                f"{directory / CACHE_FILE}); give the DIR that `skynet-eval run --cache DIR` "
                "was given"
            )
        return cls(action=args.action, directory=str(directory), json=args.json)


# -- check ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckOptions:
    """``skynet-eval check METRIC --data FILE``: with the models, simulator and prices
    of ``run`` (the same flags), so a judge metric is checked as it will run."""

    HELP: ClassVar[str] = "run the metric contract check"
    DESCRIPTION: ClassVar[str] = (
        "Check a metric file (and a program, with --program) against the contract on the "
        "first 3 examples, with the models a run would give them."
    )

    metric: str
    data: DataOptions
    program: str | None = None
    artifact: Any = None
    timeout: float = DEFAULT_TIMEOUT
    program_timeout: float | None = None
    execution: str | None = None
    program_execution: str | None = None
    serving: ServingOptions = ServingOptions()
    json: bool = False

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "metric_file", nargs="?", metavar="METRIC", help="the metric file (defines `score`)"
        )
        parser.add_argument(
            "--metric", metavar="FILE", help="the metric file, as `run` names it (or METRIC)"
        )
        _add_program_arguments(parser)
        _add_data_arguments(parser)
        _add_execution_arguments(parser)
        _add_model_arguments(parser.add_argument_group("models (skynet.llm)"))
        parser.add_argument("--json", action="store_true", help="print one JSON object instead")
        _add_config_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        timeout = validate_timeout(args.timeout, "timeout")
        program_timeout = _program_timeout(args)
        if args.metric_file is not None and args.metric is not None:
            raise ConfigError(
                f"two metric files ({args.metric_file} and --metric {args.metric}): give one"
            )
        path = args.metric if args.metric is not None else args.metric_file
        if path is None:
            raise ConfigError("needs the metric file: skynet-eval check METRIC --data FILE")
        if not Path(path).is_file():
            raise ConfigError(f"metric file {path!r} does not exist")
        program, artifact = _program_and_artifact(args)
        return cls(
            metric=path,
            data=DataOptions.from_args(args),
            program=program,
            artifact=artifact,
            timeout=timeout,
            program_timeout=program_timeout,
            execution=args.execution,
            program_execution=args.program_execution,
            serving=ServingOptions.from_args(args, _run_models(args)),
            json=args.json,
        )


# -- run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """``skynet-eval run``: the files, the engine's options, the models, the output."""

    HELP: ClassVar[str] = "evaluate a program (or a dataset's outputs) with a metric"
    DESCRIPTION: ClassVar[str] = (
        "Run the program on every example, score each output with the metric, and "
        "print a report. Without --program the run is score-only: each example's "
        "'output' field is scored."
    )

    metric: str
    data: DataOptions
    program: str | None = None
    artifact: Any = None
    artifact_path: str | None = None
    output: str | None = None
    """The results file: --output, else a new one under runs/ (None only for a
    struct made by hand)."""
    output_notes: tuple[str, ...] = ()
    output_defaulted: bool = False
    resume: bool = False
    force: bool = False
    report: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    program_timeout: float | None = None
    workers: int | None = None
    concurrency: int | None = None
    execution: str | None = None
    program_execution: str | None = None
    ray_address: str | None = None
    serving: ServingOptions = ServingOptions()
    json: bool = False
    cache: str | None = None
    cache_key_files: tuple[str, ...] = ()
    budget: Budget | None = None
    repeat: int = 1
    """``--repeat K``: K passes over the examples (epochs); the report shows how far each
    example's score varies across them."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--metric", required=True, metavar="FILE", help="metric file (`score`)")
        _add_program_arguments(parser)
        _add_data_arguments(parser)
        parser.add_argument(
            "--output",
            metavar="FILE",
            help="append results here (JSON Lines; default: a new file under runs/)",
        )
        parser.add_argument(
            "--resume", action="store_true", help="skip the examples already in --output"
        )
        parser.add_argument(
            "--repeat",
            type=int,
            default=1,
            metavar="K",
            help="run every example K times (epochs); the report shows each example's "
            "score variance across the K passes (default 1)",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="with --resume: keep results made with other files (a changed metric, "
            "program, artifact or dataset) instead of refusing",
        )
        parser.add_argument(
            "--report",
            metavar="OUT.html",
            help="also write the run's HTML report here (as `skynet-eval report` does)",
        )
        RunOptions._add_engine_arguments(parser)
        _add_budget_arguments(parser.add_argument_group("budget (never overrun)"))
        _add_model_arguments(parser.add_argument_group("models (skynet.llm)"))
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        _add_config_argument(parser)

    @staticmethod
    def _add_engine_arguments(parser: argparse.ArgumentParser) -> None:
        _add_execution_arguments(parser)
        parser.add_argument("--workers", type=int, help="worker threads or processes")
        parser.add_argument("--concurrency", type=int, help="examples in flight at most")
        parser.add_argument(
            "--ray-address",
            metavar="ADDRESS",
            help="the Ray cluster of --execution ray: 'auto' (the one `ray start --head` "
            "started here), HOST:PORT or ray://HOST:PORT (default: a local instance)",
        )
        parser.add_argument(
            "--cache",
            metavar="DIR",
            help="keep results in DIR and take from it the results of examples already run "
            "with the same files, artifact and models (shared by concurrent runs)",
        )
        parser.add_argument(
            "--cache-key-file",
            action="append",
            default=[],
            metavar="PATH",
            help="a file the metric or program reads that the cache key must hold (an edit "
            "to it runs the examples again); repeat for more",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        timeout = validate_timeout(args.timeout, "timeout")
        program_timeout = _program_timeout(args)
        _positive(args.workers, "workers")
        _positive(args.concurrency, "concurrency")
        program, artifact = _program_and_artifact(args)
        if args.force and not args.resume:
            raise ConfigError(
                "only applies to a resume: add --resume (it keeps results made with other "
                "files instead of refusing them)",
                option="force",
            )
        _run_repeat(args)
        metric = str(_file(args.metric, "--metric"))
        data = DataOptions.from_args(args)
        output, notes = _run_output(args.output, resume=args.resume, metric=metric)
        inputs = [metric, data.path, program, args.artifact]
        return cls(
            metric=metric,
            data=data,
            program=program,
            artifact=artifact,
            artifact_path=args.artifact,
            output=output,
            output_notes=notes,
            output_defaulted=args.output is None,
            resume=args.resume,
            force=args.force,
            report=_report_file(args.report, output, inputs),
            timeout=timeout,
            program_timeout=program_timeout,
            **engine_fields(args),
            budget=_budget(args),
            repeat=args.repeat,
        )


def engine_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The engine's fields of an options struct, read the same way for every command that
    runs one (``run``, ``race``): its workers, executors, models and cache."""
    return {
        "workers": args.workers,
        "concurrency": args.concurrency,
        "execution": args.execution,
        "program_execution": args.program_execution,
        "ray_address": validate_ray_address(args.ray_address),
        "serving": ServingOptions.from_args(args, _run_models(args)),
        "json": args.json,
        "cache": _cache_directory(args.cache),
        "cache_key_files": _cache_key_files(args.cache_key_file, args.cache),
    }


def _run_repeat(args: argparse.Namespace) -> None:
    """``--repeat K``: a whole number (as ``judges --repeat``), and not with ``--cache``,
    whose hits would give every pass the first pass's result: K identical scores per
    example, a variance of 0 that was never measured."""
    from evaluator._judges._compare import MAX_REPEAT
    from evaluator._judges._flags import _check_count

    _check_count(args.repeat, "--repeat", MAX_REPEAT)
    if args.repeat > 1 and args.cache is not None:
        raise ConfigError(
            f"--repeat {args.repeat} measures how an example's score varies from run to "
            "run, and --cache would hand every repeat the first one's cached result (a "
            "variance of 0 that was never measured): drop --cache, or use --repeat 1"
        )


def _add_budget_arguments(group: Any) -> None:
    group.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="spend at most USD on model calls (each call reserves its worst case before "
        "it is sent; the models need a price)",
    )
    group.add_argument(
        "--max-calls", type=int, metavar="N", help="send at most N model calls (retries count)"
    )
    group.add_argument(
        "--max-time",
        type=float,
        metavar="S",
        help="start no example, and send no model call, after S seconds",
    )


def _budget(args: argparse.Namespace) -> Budget | None:
    """The run's budget (None: no limit); the examples it leaves are budget_exhausted."""
    if args.max_cost is None and args.max_calls is None and args.max_time is None:
        return None
    for dest in ("max_cost", "max_calls", "max_time"):
        _zero_or_more(getattr(args, dest), dest)
    from evaluator import Budget

    return Budget(usd=args.max_cost, calls=args.max_calls, seconds=args.max_time)


def _cache_key_files(paths: list[str], cache: str | None) -> tuple[str, ...]:
    if paths and cache is None:
        raise ConfigError("adds files to the cache key: add --cache DIR", option="cache_key_file")
    from evaluator._cache import check_key_files

    return tuple(map(str, check_key_files(paths, option="cache_key_file")))


def _cache_directory(path: str | None) -> str | None:
    if path is None:
        return None
    from evaluator._cache import check_directory

    return str(check_directory(path))


#: Where a run without --output keeps its results (relative: to the working folder).
RUNS_DIR_ENV = "SKYNET_EVAL_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"


def default_output(metric: str, now: datetime.datetime | None = None) -> str:
    """``runs/<UTC time>-<metric's stem>.jsonl`` (the folder: $SKYNET_EVAL_RUNS_DIR, else
    ``runs``); a name already taken gets ``-2``, ``-3``... The name is claimed (created,
    empty) here: two runs started in the same second, in two processes, get two files."""
    folder = Path(os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR)
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(metric).stem)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return str(folder / f"{stamp}-{stem}.jsonl")  # the output check says what is wrong
    for n in range(1, 10_000):
        path = folder / (f"{stamp}-{stem}.jsonl" if n == 1 else f"{stamp}-{stem}-{n}.jsonl")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        except OSError:
            break  # not writable, say: the output check says so, naming --output
        return str(path)
    return str(folder / f"{stamp}-{stem}.jsonl")


def _run_output(path: str | None, *, resume: bool, metric: str) -> tuple[str, tuple[str, ...]]:
    """``--output`` (without it, a new file under ``runs/``: every run keeps its results)
    and the warnings its check gave (low free space, say).

    Checked here, before the dataset is read and the contract check runs, so a path that
    cannot be written fails in a second: what is in the file (results to resume, another
    run's lock, a dataset) is looked at when the run opens it, with the dataset's ids.
    """
    from evaluator._exceptions import OutputPathError
    from evaluator._outpath import check_output_path

    if path is None:
        if resume:
            raise ConfigError("needs --output FILE (the results to go on from)", option="resume")
        path = default_output(metric)
        try:
            return path, check_output_path(path).notes
        except OutputPathError as exc:
            raise ConfigError(
                f"a run without --output keeps its results in {path}, but {exc.detail}; "
                f"give --output FILE (or set {RUNS_DIR_ENV} to another folder)"
            ) from None
    return path, check_output_path(path).notes


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError, RuntimeError):
        return a == b


def _report_file(path: str | None, output: str | None, inputs: list[str | None]) -> str | None:
    """``--report``: a file that can be written, and none the run reads or writes."""
    if path is None:
        return None
    if output is not None and _same_file(path, output):
        raise ConfigError(
            f"{path} is also --output: the report is HTML, the results are JSON Lines; "
            "give it another name, e.g. report.html",
            option="report",
            value=path,
        )
    for used in inputs:
        if used is not None and _same_file(path, used):
            raise ConfigError(
                f"{path} is one of the run's own files and would be overwritten; give the "
                "report another name, e.g. report.html",
                option="report",
                value=path,
            )
    from evaluator._outpath import check_output_path

    check_output_path(path, option="report")
    return path


_RUN_MODEL_ONLY = (
    "base_url",
    "metric_base_url",
    "reflection_base_url",
    "rpm",
    "tpm",
    "price_input",
    "price_output",
    "hedge",
)


def _run_models(args: argparse.Namespace) -> tuple[ModelRequest, ...]:
    """The run's models by stage; each base URL defaults to that of its fallback (the
    metric model's to the reflection model's, that one's to the program model's)."""
    names = {
        "program": _model_name(args.model, "model"),
        "metric": _model_name(args.metric_model, "metric_model"),
        "reflection": _model_name(args.reflection_model, "reflection_model"),
    }
    if not any(names.values()):
        for dest in _RUN_MODEL_ONLY:
            if getattr(args, dest) is not None:
                raise ConfigError(f"needs a model: {_NEEDS_A_MODEL}", option=dest)
        # --simulator alone serves the program's and metric's own SDK calls.
        return ()
    program_url = _url(args.base_url, "base_url")
    reflection_url = _url(args.reflection_base_url, "reflection_base_url") or program_url
    urls = {
        "program": program_url,
        "reflection": reflection_url,
        "metric": _url(args.metric_base_url, "metric_base_url") or reflection_url,
    }
    requests = []
    for role, name in names.items():
        if name is None:
            continue
        request = ModelRequest(role, name, urls[role], args.price_input, args.price_output)
        if request.base_url is None:
            request = _litellm_request(
                request, dest=f"{role}_model" if role != "program" else "model"
            )
        requests.append(request)
    return tuple(requests)


def _litellm_request(request: ModelRequest, *, dest: str) -> ModelRequest:
    """A litellm-style name (``openai/gpt-4o-mini``) given without a base URL, as the
    Python adapters read it: the provider's base URL and key variable, the bare name."""
    from evaluator._lm import litellm_name

    found = litellm_name(request.model, dest)
    if found is None:
        return request
    name, base_url, key_env = found
    return ModelRequest(
        request.role,
        name,
        base_url,
        request.price_input,
        request.price_output,
        key_env if key_env is not None else "",
    )


# -- judges -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgesOptions:
    """``skynet-eval judges``: one judge metric, several models, maybe across providers."""

    HELP: ClassVar[str] = "compare judge models: cost, latency and agreement"
    DESCRIPTION: ClassVar[str] = (
        "Run a judge metric once per model (or K times with --repeat) over the same outputs "
        "and compare cost, latency, self-agreement and agreement with a reference model or "
        "human labels."
    )

    metric: str
    data: DataOptions
    judges: tuple[JudgeSpec, ...]
    reference: str | None = None
    labels: str | None = None
    program: str | None = None
    artifact: Any = None
    simulator: SimulatorConfig | None = None
    repeat: int = 1
    project: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    output: str | None = None
    plot: str | None = None

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--metric", required=True, help="the judge metric file (calls skynet.llm)"
        )
        _add_data_arguments(parser)
        parser.add_argument("--models", help="comma-separated model names, behind one --base-url")
        parser.add_argument(
            "--models-file",
            metavar="FILE",
            help="models across providers (.toml or .json): name, label, base_url, "
            "api_key_env, prices, rpm/tpm, call options per model",
        )
        parser.add_argument(
            "--repeat", type=int, default=1, metavar="K", help="judge every example K times"
        )
        parser.add_argument(
            "--project",
            type=int,
            metavar="N",
            help="project each model's cost and time for N examples",
        )
        ref = parser.add_mutually_exclusive_group()
        ref.add_argument("--reference", help="agreement against this model (default: the first)")
        ref.add_argument(
            "--labels", metavar="COLUMN", help="agreement against human labels in COLUMN"
        )
        parser.add_argument(
            "--program", help="program file; its outputs are computed once for all judges"
        )
        parser.add_argument(
            "--artifact", help="artifact file for the program (.json parsed, else text)"
        )
        parser.add_argument(
            "--base-url", help=f"OpenAI-compatible base URL (default: {OPENAI_BASE_URL})"
        )
        parser.add_argument(
            "--api-key-env",
            help="environment variable holding the API key (default: OPENAI_API_KEY; "
            "'none' for a server without keys)",
        )
        parser.add_argument("--rpm", type=float, help="requests per minute, per model")
        parser.add_argument("--tpm", type=float, help="tokens per minute, per model")
        parser.add_argument(
            "--price",
            type=price,
            action="append",
            default=[],
            metavar="MODEL=IN,OUT",
            help="price override in USD per million input,output tokens (repeatable)",
        )
        _add_metric_timeout_argument(parser)
        _add_simulator_argument(parser)
        parser.add_argument("--output", metavar="FILE", help="write the report as JSON")
        parser.add_argument(
            "--plot", metavar="FILE.png", help="draw cost per 1,000 examples against agreement"
        )
        _add_config_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        from evaluator._judges import check_keys, choose_reference, judges_from_flags

        timeout = validate_timeout(args.timeout, "timeout")
        metric = str(_file(args.metric, "--metric"))
        program = _file(args.program, "--program")
        _positive(args.rpm, "rpm")
        _positive(args.tpm, "tpm")
        _url(args.base_url, "base_url")
        if args.api_key_env is not None:
            _key_env(args.api_key_env)
        for label, price_in, price_out in args.price:
            if not all(math.isfinite(p) and p >= 0 for p in (price_in, price_out)):
                raise ConfigError(
                    f"{label}: prices must be zero or more, got {price_in:g},{price_out:g}",
                    option="price",
                )
        data = DataOptions.from_args(args)
        artifact = _artifact(args.artifact, None)
        output, plot = _new_file(args.output, "output"), _plot_file(args.plot)
        simulator = _simulator_config(args.simulator)
        judges = judges_from_flags(
            models_file=args.models_file,
            models=args.models,
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            rpm=args.rpm,
            tpm=args.tpm,
            price=args.price,
            repeat=args.repeat,
            project=args.project,
            simulator=simulator,
            keys=False,
        )
        reference = choose_reference(judges, args.reference, args.labels)
        if simulator is None:
            check_keys(judges)  # last: every other mistake is named first
        return cls(
            metric=metric,
            data=data,
            judges=tuple(judges),
            reference=reference,
            labels=args.labels,
            program=program,
            artifact=artifact,
            simulator=simulator,
            repeat=args.repeat,
            project=args.project,
            timeout=timeout,
            output=output,
            plot=plot,
        )


def _plot_file(path: str | None) -> str | None:
    if path is None:
        return None
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("needs matplotlib: pip install 'skynet-eval[plot]'", option="plot")
    return _new_file(path, "plot")


# -- simulator --------------------------------------------------------------------------

_FAULT_FLAGS = (
    ("error-500", "HTTP 500"),
    ("error-503", "HTTP 503"),
    ("rate-limit", "injected 429 (apart from --rpm/--tpm)"),
    ("insufficient-quota", "429 insufficient_quota"),
    ("slow", "replies delayed by --slow-ms"),
    ("malformed", "malformed 200 bodies"),
    ("drop", "dropped connections"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatorOptions:
    """``skynet-eval simulator``: the whole command is one ``SimulatorConfig``, checked by
    llm_client itself (its messages name the config's fields: ``drop_rate``)."""

    HELP: ClassVar[str] = "serve a local OpenAI-compatible model simulator (for tests and examples)"
    DESCRIPTION: ClassVar[str] = (
        "Serve the OpenAI-compatible simulator on 127.0.0.1 until Ctrl-C or SIGTERM. Prints "
        "one line, `simulator serving at http://127.0.0.1:PORT/v1`, once it is listening "
        "(so a script can read the port when --port 0 picks one), and a summary of what "
        "it saw when it stops."
    )

    config: SimulatorConfig

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        p = parser
        p.add_argument("--port", type=int, default=8765, help="TCP port; 0 picks a free one")
        p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
        p.add_argument("--seed", type=int, default=0, help="seed of latency jitter and faults")
        p.add_argument("--latency-ms", type=float, default=0.0, help="fixed latency per reply")
        p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform extra latency 0..J")
        p.add_argument("--rpm", type=float, default=None, help="requests per minute limit")
        p.add_argument("--tpm", type=float, default=None, help="tokens per minute limit")
        p.add_argument(
            "--window", type=float, default=60.0, help="sliding window of the limits, seconds"
        )
        for kind, what in _FAULT_FLAGS:
            p.add_argument(f"--{kind}-rate", type=float, default=0.0, help=f"share of {what}")
        p.add_argument("--slow-ms", type=float, default=5000.0, help="delay of a slow reply")
        p.add_argument(
            "--tail-share", type=float, default=0.0, help="share of replies slowed (a heavy tail)"
        )
        p.add_argument(
            "--tail-factor", type=float, default=10.0, help="how many times slower (default 10)"
        )
        p.add_argument(
            "--pass-rate", type=float, default=0.5, help="share of PASS for hashed judge verdicts"
        )
        p.add_argument(
            "--model",
            dest="models",
            action="append",
            type=simulated_model,
            default=[],
            metavar="NAME[:latency_ms=..,jitter_ms=..,noise=..,flip_rate=..,reasoning_tokens=..]",
            help="serve this model (repeatable); when given, other model names get 404",
        )
        p.add_argument("--api-key", default=None, help="require this bearer key (default: none)")
        p.add_argument(
            "--no-rate-limit-headers",
            dest="rate_limit_headers",
            action="store_false",
            help="answer 429s bare and send no x-ratelimit-* headers (a server that gives "
            "no hints, to measure a client's adaptation)",
        )
        p.add_argument(
            "--capacity",
            type=int,
            default=None,
            metavar="N",
            help="requests served at once at the set latency; past it, replies slow down "
            "in proportion (or are refused: --over-capacity 429)",
        )
        p.add_argument(
            "--over-capacity",
            choices=("slow", "429"),
            default="slow",
            help="what a request past --capacity gets (default: slow)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        from llm_client import ModelSettings, SimulatorConfig

        faults = {
            f"{kind.replace('-', '_')}_rate": getattr(args, f"{kind.replace('-', '_')}_rate")
            for kind, _ in _FAULT_FLAGS
        }
        config = SimulatorConfig(
            host=args.host,
            port=args.port,
            seed=args.seed,
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            rpm=args.rpm,
            tpm=args.tpm,
            window_s=args.window,
            slow_ms=args.slow_ms,
            tail_share=args.tail_share,
            tail_factor=args.tail_factor,
            pass_rate=args.pass_rate,
            models={name: ModelSettings(**kw) for name, kw in args.models},
            api_key=args.api_key,
            rate_limit_headers=args.rate_limit_headers,
            capacity=args.capacity,
            over_capacity=args.over_capacity,
            **faults,
        )
        return cls(config=config)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """``skynet-eval report RESULTS [--baseline RESULTS] [--html OUT] ...``."""

    HELP: ClassVar[str] = "a run's report as one HTML page, optionally against a baseline run"
    DESCRIPTION: ClassVar[str] = (
        "Summarise a results file (written by `skynet-eval run --output`) in the terminal "
        "and as one self-contained HTML page: scores, errors, time and cost, every "
        "example; with --baseline, what changed, example by example."
    )

    results: str
    baseline: str | None = None
    html: str | None = None
    no_html: bool = False
    data: str | None = None
    input_cols: tuple[str, ...] | None = None
    output_cols: tuple[str, ...] | None = None
    tolerance: float = 0.0
    title: str | None = None
    json: bool = False
    fail_on_regression: bool = False
    failures: bool = False
    csv: str | None = None

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("results", metavar="RESULTS", help="the results file (JSON Lines)")
        parser.add_argument(
            "--baseline", metavar="RESULTS", help="an earlier run's results file to compare with"
        )
        where = parser.add_mutually_exclusive_group()
        where.add_argument(
            "--html", metavar="OUT", help="write the page here (default: RESULTS with .html)"
        )
        where.add_argument("--no-html", action="store_true", help="print the summary only")
        parser.add_argument(
            "--data",
            metavar="FILE",
            help="the run's dataset, to show each example's input and expected value",
        )
        parser.add_argument(
            "--input-cols", type=columns, action="extend", metavar="COLS", help="as for `run`"
        )
        parser.add_argument(
            "--output-cols", type=columns, action="extend", metavar="COLS", help="as for `run`"
        )
        parser.add_argument(
            "--tolerance",
            type=float,
            default=0.0,
            help="score differences up to this count as the same (default 0; e.g. 0.01 for "
            "a reward whose speed and cost parts move a little every run)",
        )
        parser.add_argument(
            "--failures",
            action="store_true",
            help="also list every failed example in the terminal: id, kind, message",
        )
        parser.add_argument(
            "--csv", metavar="OUT", help="also export every result to this CSV file"
        )
        parser.add_argument("--title", help="the page's title")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")
        parser.add_argument(
            "--fail-on-regression",
            action="store_true",
            help="exit 1 when the run is worse than the baseline (the 95%% interval of the "
            "mean difference lies below 0) or misses examples the baseline has",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        # The checks live with the command's logic (report_command), which a library
        # caller reaches without this struct; here the words only become a struct.
        return cls(
            results=args.results,
            baseline=args.baseline,
            html=args.html,
            no_html=args.no_html,
            data=args.data,
            input_cols=tuple(args.input_cols) if args.input_cols else None,
            output_cols=tuple(args.output_cols) if args.output_cols else None,
            tolerance=args.tolerance,
            title=args.title,
            json=args.json,
            fail_on_regression=args.fail_on_regression,
            failures=args.failures,
            csv=args.csv,
        )
