"""``skynet-eval report``: its flags are ``_options.ReportOptions`` (with the other
commands'); the logic is ``evaluator._report.html._command``, whose modules load only in
:func:`execute`.
"""

from __future__ import annotations

from dataclasses import asdict

from ._options import ReportOptions

__all__ = ["execute"]


def execute(options: ReportOptions) -> int:
    """Run the command; the exit code (0 done, 1 a regression with --fail-on-regression)."""
    from .._race import is_race_file
    from .._report.html._command import race_report_command, report_command

    if is_race_file(options.results):  # `skynet-eval race --output`: the race's page
        return race_report_command(**asdict(options))
    return report_command(**asdict(options))
