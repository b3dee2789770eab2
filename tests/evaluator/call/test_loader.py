"""Loading metric and program files by path."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator import ContractError, load_metric, load_program
from evaluator._exceptions import STEP_FILE, STEP_SIGNATURE
from tests._helpers import write

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "metrics"


class TestForms:
    def test_three_arguments(self, tmp_path: Path) -> None:
        """`score(input, output, expected=None)` is called with three arguments."""
        fn = load_metric(
            write(
                tmp_path,
                "m.py",
                "def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n",
            )
        )
        assert fn.arity == 3 and not fn.is_async

    def test_two_arguments(self, tmp_path: Path) -> None:
        """`score(input, output)` is called with two."""
        fn = load_metric(
            write(tmp_path, "m.py", "def score(input, output):\n    return 1.0, {'feedback': ''}\n")
        )
        assert fn.arity == 2

    def test_async(self, tmp_path: Path) -> None:
        """`async def score` is detected."""
        fn = load_metric(
            write(
                tmp_path,
                "m.py",
                "async def score(i, o, e=None):\n    return 1.0, {'feedback': ''}\n",
            )
        )
        assert fn.is_async and fn.arity == 3

    def test_varargs(self, tmp_path: Path) -> None:
        """`score(*args)` takes all three arguments."""
        assert load_metric(write(tmp_path, "m.py", "def score(*args):\n    pass\n")).arity == 3

    def test_keyword_only_with_default(self, tmp_path: Path) -> None:
        """Keyword-only parameters with defaults are fine."""
        fn = load_metric(write(tmp_path, "m.py", "def score(i, o, *, strict=False):\n    pass\n"))
        assert fn.arity == 2

    def test_required_keyword_only(self, tmp_path: Path) -> None:
        """A required keyword-only parameter fails the signature step, naming it."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "def score(i, o, *, mode):\n    pass\n"))
        assert info.value.step == STEP_SIGNATURE and "mode" in info.value.message
        assert info.value.line == 1

    def test_too_many_required(self, tmp_path: Path) -> None:
        """Four required parameters fit neither form."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "\n\ndef score(a, b, c, d):\n    pass\n"))
        assert info.value.step == STEP_SIGNATURE
        assert "requires 4" in info.value.message and info.value.line == 3

    def test_too_few(self, tmp_path: Path) -> None:
        """One parameter fits neither form."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "def score(x):\n    pass\n"))
        assert info.value.step == STEP_SIGNATURE and "accepts only 1" in info.value.message

    def test_program_form(self, tmp_path: Path) -> None:
        """`run(artifact, input)` loads with two arguments."""
        assert (
            load_program(write(tmp_path, "p.py", "def run(artifact, input):\n    return 1\n")).arity
            == 2
        )

    def test_execution_and_spec(self, tmp_path: Path) -> None:
        """EXECUTION and REWARD_SPEC are read from the module."""
        fn = load_metric(
            write(
                tmp_path,
                "m.py",
                "EXECUTION = 'thread'\nREWARD_SPEC = {'x': 1}\ndef score(i, o):\n    pass\n",
            )
        )
        assert fn.execution == "thread" and fn.has_reward_spec and fn.reward_spec == {"x": 1}

    def test_bad_execution(self, tmp_path: Path) -> None:
        """An unknown EXECUTION is a failed file step listing the choices."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "EXECUTION = 'gpu'\ndef score(i, o):\n    pass\n"))
        assert info.value.step == STEP_FILE and "'process'" in info.value.message

    def test_uses_llm(self) -> None:
        """A metric importing skynet.llm is seen as using the model."""
        assert load_metric(EXAMPLES / "judge.py").uses_llm
        assert not load_metric(EXAMPLES / "exact_match.py").uses_llm


SCORE = "\ndef score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n"


class TestModelUse:
    @pytest.mark.parametrize(
        ("source", "uses"),
        [
            ("import openai", ("openai",)),
            ("from openai import OpenAI", ("openai",)),
            ("import openai.types as t", ("openai",)),
            # Imports inside functions count: litellm and dspy are slow to import.
            ("def ask():\n    import litellm\n    return litellm.completion", ("litellm",)),
            ("def ask():\n    from litellm import completion", ("litellm",)),
            ("def ask():\n    import dspy", ("dspy",)),
            (
                "try:\n    import anthropic\nexcept ImportError:\n    anthropic = None",
                ("anthropic",),
            ),
            ("from skynet import llm", ("skynet.llm",)),
            ("from skynet import allm", ("skynet.llm",)),
            ("import skynet\ndef ask():\n    return skynet.llm('x')", ("skynet.llm",)),
            ("import skynet as sk\ndef ask():\n    return sk.allm('x')", ("skynet.llm",)),
            ("from skynet import llm\nimport openai", ("skynet.llm", "openai")),
        ],
    )
    def test_a_module_that_calls_a_model_is_model_bound(
        self, tmp_path: Path, source: str, uses: tuple[str, ...]
    ) -> None:
        """Each way of importing skynet.llm or a model SDK (openai, litellm, dspy,
        anthropic) makes the function model-bound, naming what it uses."""
        fn = load_metric(write(tmp_path, "m.py", source + SCORE))
        assert fn.model_use == uses and fn.model_bound
        assert fn.uses_llm == ("skynet.llm" in uses)

    @pytest.mark.parametrize(
        "source",
        [
            "NOTE = 'this metric does not call openai, litellm, dspy or anthropic'",
            "# import openai\nimport json",
            "from skynet import reward",
            "import skynet\ndef f():\n    return skynet.reward",
            "x = {'openai': 1}",
        ],
    )
    def test_a_word_is_not_an_import(self, tmp_path: Path, source: str) -> None:
        """A module that mentions an SDK in a string, a comment or a key, or that uses
        skynet only for `reward`, stays CPU-bound."""
        fn = load_metric(write(tmp_path, "m.py", source + SCORE))
        assert fn.model_use == () and not fn.model_bound

    def test_sdk_client_from_a_helper(self, tmp_path: Path) -> None:
        """An SDK client object built in another module and imported is seen by its type."""
        helper = f"client_{tmp_path.name}"
        write(
            tmp_path,
            f"{helper}.py",
            "import openai\nclient = openai.OpenAI(api_key='x', base_url='http://127.0.0.1:9/v1')\n",
        )
        fn = load_metric(write(tmp_path, "m.py", f"from {helper} import client" + SCORE))
        assert fn.model_use == ("openai",)

    def test_sibling_helper_that_imports_an_sdk(self, tmp_path: Path) -> None:
        """A function imported from the user's own sibling module that imports an SDK
        (inside its functions too) makes the metric model-bound, one level deep."""
        helper = f"ask_{tmp_path.name}"
        write(tmp_path, f"{helper}.py", "def ask(q):\n    import litellm\n    return q\n")
        fn = load_metric(write(tmp_path, "m.py", f"from {helper} import ask" + SCORE))
        assert fn.model_use == ("litellm",)

    def test_page_examples(self) -> None:
        """The page's judge metric calls skynet.llm; its exact match calls no model."""
        assert load_metric(EXAMPLES / "judge.py").model_use == ("skynet.llm",)
        assert load_metric(EXAMPLES / "exact_match.py").model_use == ()


class TestBrokenFiles:
    def test_syntax_error(self, tmp_path: Path) -> None:
        """A syntax error names the file and the line."""
        path = write(tmp_path, "m.py", "x = 1\ndef score(i, o:\n    pass\n")
        with pytest.raises(ContractError) as info:
            load_metric(path)
        assert info.value.step == STEP_FILE and info.value.line == 2
        assert str(path.resolve()) in str(info.value) and "SyntaxError" in str(info.value)

    def test_import_error(self, tmp_path: Path) -> None:
        """An import error in the file names the line that raised it."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "import os\nimport no_such_module_xyz\n"))
        assert info.value.line == 2 and "no_such_module_xyz" in info.value.message

    def test_no_score(self, tmp_path: Path) -> None:
        """A file without `score` says so and lists what it defines."""
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", "def scorer(i, o):\n    pass\n"))
        assert info.value.step == STEP_FILE and "no `score`" in info.value.message
        assert "scorer" in info.value.message

    def test_score_not_callable(self, tmp_path: Path) -> None:
        """A `score` that is a number is refused."""
        with pytest.raises(ContractError, match="not a function"):
            load_metric(write(tmp_path, "m.py", "score = 0.5\n"))

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is a failed file step."""
        with pytest.raises(ContractError, match="no such file"):
            load_metric(tmp_path / "nope.py")

    def test_exit_at_import(self, tmp_path: Path) -> None:
        """A file that calls exit() at import does not end the engine."""
        with pytest.raises(ContractError, match="SystemExit"):
            load_metric(write(tmp_path, "m.py", "raise SystemExit(3)\n"))

    @pytest.mark.parametrize(
        "source",
        [
            "import os\nos._exit(3)\n",
            "import os\ntry:\n    os._exit(3)\nexcept Exception:\n    pass\n",
            "from os import _exit\n_exit(3)\n",
        ],
    )
    def test_os_exit_at_import_is_named(self, tmp_path: Path, source: str) -> None:
        """A file that calls os._exit at import (even inside `except Exception`) is a
        failed file step naming the code and the line, not a silent end of the engine;
        os._exit is the real one again afterwards."""
        import os

        real = os._exit
        with pytest.raises(ContractError) as info:
            load_metric(write(tmp_path, "m.py", source))
        assert "exited the process while importing (os._exit(3) at import)" in str(info.value)
        assert info.value.line == source.count("\n", 0, source.index("_exit(3)")) + 1
        assert os._exit is real

    def test_os_exit_saved_at_import_still_exits_later(self, tmp_path: Path) -> None:
        """A file that keeps a reference to os._exit while importing gets the real exit
        when it calls it later (in a subprocess: it ends that process with its code)."""
        import subprocess
        import sys

        path = write(
            tmp_path,
            "m.py",
            "import os\nsaved = os._exit\ndef score(i, o):\n    saved(7)\n",
        )
        code = (
            "import sys; from evaluator import load_metric; "
            f"fn = load_metric({str(path)!r}); fn.fn(1, 2); sys.exit(0)"
        )
        done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
        assert done.returncode == 7


class TestModules:
    def test_two_files_named_metric(self, tmp_path: Path) -> None:
        """Two files both named metric.py load as different modules."""
        a = load_metric(
            write(
                tmp_path / "a", "metric.py", "def score(i, o):\n    return 1.0, {'feedback': 'a'}\n"
            )
        )
        b = load_metric(
            write(
                tmp_path / "b", "metric.py", "def score(i, o):\n    return 0.0, {'feedback': 'b'}\n"
            )
        )
        assert a.module_name != b.module_name
        assert a.fn(None, None)[1]["feedback"] == "a" and b.fn(None, None)[1]["feedback"] == "b"

    def test_sibling_import(self, tmp_path: Path) -> None:
        """A metric can import a module beside it."""
        folder = tmp_path / "sib"
        write(folder, "helpers_for_metric_xyz.py", "WANT = 'yes'\n")
        fn = load_metric(
            write(
                folder,
                "metric.py",
                "from helpers_for_metric_xyz import WANT\ndef score(i, o):\n    return float(o == WANT), {'feedback': ''}\n",
            )
        )
        assert fn.fn(None, "yes")[0] == 1.0

    def test_loaded_once(self, tmp_path: Path) -> None:
        """Loading the same path twice imports it once."""
        path = write(tmp_path, "m.py", "def score(i, o):\n    pass\n")
        assert load_metric(path).module is load_metric(path).module

    @pytest.mark.parametrize(
        "name", ["exact_match.py", "json_checks.py", "judge.py", "reward_blend.py"]
    )
    def test_page_examples_load(self, name: str) -> None:
        """The product page's four metrics load and pass the signature step."""
        assert load_metric(EXAMPLES / name).arity == 3
