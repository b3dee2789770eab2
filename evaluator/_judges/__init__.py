"""Choosing a judge model: one judge metric, several models across providers, one report.

``compare_judges`` runs the comparison; ``load_models_file`` reads a models file;
``judges_from_flags``, ``serve_judges`` and ``print_judges`` are what the command line
maps its flags onto; ``plot_judges`` (in ``evaluator._judges._plot``) draws the report.
"""

from .._exceptions import ModelsFileError as ModelsFileError
from ._compare import MAX_REPEAT as MAX_REPEAT
from ._compare import compare_judges as compare_judges
from ._compare import verdict_of as verdict_of
from ._flags import check_keys as check_keys
from ._flags import check_simulated as check_simulated
from ._flags import choose_reference as choose_reference
from ._flags import judges_from_flags as judges_from_flags
from ._flags import parse_price as parse_price
from ._flags import serve_judges as serve_judges
from ._models_file import REASONING_EFFORTS as REASONING_EFFORTS
from ._models_file import load_models_file as load_models_file
from ._report import Confusion as Confusion
from ._report import JudgeCall as JudgeCall
from ._report import JudgeCase as JudgeCase
from ._report import JudgeRow as JudgeRow
from ._report import JudgesReport as JudgesReport
from ._report import Projection as Projection
from ._report import SelfAgreement as SelfAgreement
from ._spec import JudgeSpec as JudgeSpec
from ._table import print_judges as print_judges

__all__ = [
    "MAX_REPEAT",
    "REASONING_EFFORTS",
    "Confusion",
    "JudgeCall",
    "JudgeCase",
    "JudgeRow",
    "JudgeSpec",
    "JudgesReport",
    "ModelsFileError",
    "Projection",
    "SelfAgreement",
    "check_keys",
    "check_simulated",
    "choose_reference",
    "compare_judges",
    "judges_from_flags",
    "load_models_file",
    "parse_price",
    "print_judges",
    "serve_judges",
    "verdict_of",
]
