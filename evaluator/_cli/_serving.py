"""The step that readies the models of ``run``.

From the flags (a :class:`~._options.ServingOptions`) it builds each ``ModelConfig``,
checks that every API key is there before any work starts (a missing key is a usage
error now, not one failed row per example later), and with ``--simulator`` starts the
simulator on 127.0.0.1 and points every model at it (no key then). ``judges`` readies
its models with the library's ``evaluator._judges.judges_from_flags`` and
``serve_judges`` (one simulator per provider, keys per model), which follow the same
rules: keys checked last and named by variable, no key sent to a simulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from evaluator import ConfigError

from ._options import ModelRequest, ServingOptions

if TYPE_CHECKING:
    from evaluator import Models
    from llm_client import ModelConfig, SimulatorConfig

__all__ = ["Serving"]


class Serving:
    """The models of one command, keyed by role, ready to be served.

    Building it checks the keys (raises ConfigError); :meth:`open` serves the models for
    as long as it is entered.
    """

    __slots__ = ("configs", "simulator", "simulator_url")

    def __init__(self, options: ServingOptions) -> None:
        self.simulator: SimulatorConfig | None = options.simulator
        #: The running simulator's base URL (inside :meth:`open`): SDK calls go there too.
        self.simulator_url: str | None = None
        # The simulator takes no key; its base URL is known once it listens.
        key_env = None if self.simulator is not None else options.api_key_env
        self.configs: dict[str, ModelConfig] = {
            request.role: _config(request, key_env, options) for request in options.models
        }
        if self.simulator is None:
            if options.default_key_env:
                _check_default_key(options.models)
            _check_keys(self.configs.values())

    @asynccontextmanager
    async def open(self) -> AsyncIterator[dict[str, ModelConfig]]:
        """The configs, each pointed at the simulator when there is one (started here,
        stopped on the way out; it serves the user's own SDK calls too, so it starts even
        when no model is configured)."""
        if self.simulator is None:
            yield dict(self.configs)
            return
        import msgspec

        from llm_client import Simulator

        async with Simulator(self.simulator) as sim:
            self.simulator_url = sim.base_url
            try:
                yield {
                    role: msgspec.structs.replace(config, base_url=sim.base_url)
                    for role, config in self.configs.items()
                }
            finally:
                self.simulator_url = None

    def models(self, configs: dict[str, ModelConfig]) -> Models | None:
        """The command's models (``configs`` as :meth:`open` yields them); with
        --simulator, the simulator serves the program's and metric's SDK calls too."""
        if not configs and self.simulator_url is None:
            return None
        from evaluator import Models

        return Models(
            program=configs.get("program"),
            metric=configs.get("metric"),
            reflection=configs.get("reflection"),
            sdk_base_url=self.simulator_url,
        )


def _config(request: ModelRequest, key_env: str | None, options: ServingOptions) -> ModelConfig:
    from llm_client import ModelConfig

    if key_env is not None and request.key_env is not None and options.default_key_env:
        # A litellm-style name's provider has its own variable (or, "", none at all).
        key_env = request.key_env or None
    fields: dict[str, Any] = {"model": request.model, "api_key_env": key_env}
    for name, value in (
        ("base_url", request.base_url),
        ("rpm", options.rpm),
        ("tpm", options.tpm),
        ("price_input", request.price_input),
        ("price_output", request.price_output),
        ("hedge", options.hedge if request.role == "metric" else None),
    ):
        if value is not None:  # unset: the ModelConfig default
            fields[name] = value
    return ModelConfig(**fields)


_URL_FLAGS = {
    "program": "base_url",
    "metric": "metric_base_url",
    "reflection": "reflection_base_url",
}


def _check_default_key(models: Iterable[ModelRequest]) -> None:
    """No --api-key-env given: OpenAI's key goes to OpenAI's base URL and nowhere else."""
    from evaluator._judges._spec import default_key_elsewhere

    for request in models:
        if request.base_url is None or request.key_env is not None:
            continue  # a litellm-style name's provider URL goes with its own variable
        refusal = default_key_elsewhere(
            _URL_FLAGS.get(request.role, "base_url"), request.base_url, request.model
        )
        if refusal is not None:
            raise refusal


def _check_keys(configs: Iterable[ModelConfig]) -> None:
    from llm_client import ModelConfigError

    for config in configs:
        try:
            config.api_key()
        except ModelConfigError:
            raise ConfigError(
                f"environment variable {config.api_key_env} (the --api-key-env of model "
                f"{config.model!r}) is not set: export it, or pass --api-key-env none for a "
                "server that takes no key"
            ) from None
