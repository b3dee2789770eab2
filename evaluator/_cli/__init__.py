"""The ``skynet-eval`` command line (``python -m evaluator`` runs it too).

_main        parser, dispatch, exit codes; user errors become one line and exit 2
_options     every command's flags, read once into one frozen, checked struct
_config      --config FILE.toml as flags (run, check, judges), and ./.env for keys
_loop        the one event-loop starter (uvloop, Ctrl-C -> 130, SIGTERM -> 143)
_serving     models from the flags, keys checked, --simulator started (run, judges)
_progress    progress bars and lines on stderr
_output      the console, stdout kept for --json, the tables
_check, _run, _judges, _simulator, _report, _cache    one module per command: execute(options)
"""

from ._main import main as main

__all__ = ["main"]
