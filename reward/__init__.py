"""Pure math of ``REWARD_SPEC``: parsing, validation, components and the weighted sum."""

__all__: list[str] = []
