"""LMI options: the option table, serving.properties, env translation, and resolution.

Light to import (pydantic only): ``plan`` and ``config show`` use it without torch.
"""

from lmi_build.options.properties import (
    PropertiesFile,
    PropertyLine,
    format_properties,
    parse_properties,
    read_properties,
    read_properties_with_lines,
    write_properties,
)
from lmi_build.options.resolve import (
    OptionInputs,
    OptionResolution,
    cli_option_pairs,
    resolve_options,
    resolved_value,
    written_options,
)
from lmi_build.options.resolved import OptionValue, ResolvedOptions, ResolvedValue, Source
from lmi_build.options.spec import OptionSpec, all_option_specs, option_spec

__all__ = [
    "OptionInputs",
    "OptionResolution",
    "OptionSpec",
    "OptionValue",
    "PropertiesFile",
    "PropertyLine",
    "ResolvedOptions",
    "ResolvedValue",
    "Source",
    "all_option_specs",
    "cli_option_pairs",
    "format_properties",
    "option_spec",
    "parse_properties",
    "read_properties",
    "read_properties_with_lines",
    "resolve_options",
    "resolved_value",
    "write_properties",
    "written_options",
]
