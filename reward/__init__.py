"""Pure math of ``REWARD_SPEC``: parsing, validation, components and the weighted sum.

No I/O and no imports from the rest of skynet-eval; the engine (``evaluator``) and the
``skynet.reward`` facade build on it.
"""

from ._components import Components as Components
from ._components import combine as combine
from ._components import components as components
from ._components import lower_is_better as lower_is_better
from ._exceptions import RewardSpecError as RewardSpecError
from ._spec import RewardSpec as RewardSpec
from ._spec import parse_spec as parse_spec

__all__ = [
    "Components",
    "RewardSpec",
    "RewardSpecError",
    "combine",
    "components",
    "lower_is_better",
    "parse_spec",
]
