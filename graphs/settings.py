"""Run settings as LangGraph context: re-exported from :mod:`pictrieve.agents.settings`.

The classes moved below ``graphs`` so that each method's folder, ``agents/<method>/``, can declare its own
settings; ``from pictrieve.graphs.settings import RunSettings`` keeps working.
"""

from pictrieve.agents.settings import (  # noqa: F401  (re-exported)
    RunSettings,
    SettingsError,
    describe_fields,
    parse_setting,
    require_positive,
    settings_of,
)

__all__ = ["RunSettings", "SettingsError", "describe_fields", "parse_setting", "require_positive", "settings_of"]
