"""``skynet-eval report``: its flags are ``_options.ReportOptions`` (with the other
commands'); the logic is ``evaluator._report_html._command``, whose modules load only in
:func:`execute`.
"""

from __future__ import annotations

from dataclasses import asdict

from ._options import ReportOptions

__all__ = ["execute"]


def execute(options: ReportOptions) -> int:
    """Run the command; the exit code (0 done, 1 a regression with --fail-on-regression)."""
    from .._report_html._command import report_command

    return report_command(**asdict(options))
