"""Run configuration (theory §6): one TOML file drives ``kernel``, ``derive``, ``solve``, ``simulate``, ``compare``.

Every table and key is declared here with its default and its valid range (:data:`RULES`). Loading checks them all
and refuses a bad file with one line that names the key, the value and the fix: an unknown key or table (with the
closest valid name), a missing required key (``target.expr``), a value of the wrong type (a string for a number, a
fraction for an integer), a number outside its range (NaN and ±inf included), an unknown name for a choice key
(with the closest valid name), inconsistent ``[data]`` keys, an unparsable target and unknown variants.

Integers may be written as floats that are whole numbers (``width = 1e3`` is TOML's float 1000.0 and reads as
1000); ``width = 1.5`` is refused.

One set of defaults: a config file (:func:`load_config`) is laid over the built-in default run
``featureode/defaults/default.toml`` (:data:`DEFAULT_PATH`), so a file that gives only ``[target]`` runs with the
same settings as ``featureode compare`` without a file (``t_max = 300``, variants ``lazy``, ``displacement`` and
the reference ``rational``, the extended basis); the keys that default file does not set take the defaults of the
dataclasses below. ``[target] expr`` has no default in a file: a file (or ``--set``) must say what to learn. ``--set
table.key=value`` (:func:`parse_set`, values read as TOML literals) changes keys after the file and before every
check. :func:`config_from_dict` validates a dict as given (the Python API's low-level door: keys it lacks take the
dataclass defaults, not those of the default file; :func:`default_dict` is the default file as a dict).

Layout of the config package (every public name is re-exported here): :mod:`~featureode.config.sections` (one
dataclass per table, with the keys' defaults; :data:`SECTIONS`, :data:`RUNTIME_KEYS`),
:mod:`~featureode.config.rules` (:data:`RULES`, the checks of one key, :class:`ConfigError`, :func:`suggest`,
:func:`resolved_device`), :mod:`~featureode.config.runconfig` (:class:`Config`, :func:`config_from_dict` and the
checks across keys) and :mod:`~featureode.config.files` (the default file, ``--set``, :func:`load_config`).
"""
from __future__ import annotations

from featureode.config.files import (  # noqa: F401  (re-exported)
    DEFAULT_PATH,
    apply_sets,
    default_dict,
    load_config,
    merge_config,
    parse_set,
)
from featureode.config.rules import (  # noqa: F401  (re-exported)
    RULES,
    Choice,
    ConfigError,
    Num,
    resolved_device,
    suggest,
)
from featureode.config.runconfig import (  # noqa: F401  (re-exported)
    Config,
    config_from_dict,
    plugins_from_dict,
    require_config,
)
from featureode.config.sections import (  # noqa: F401  (re-exported)
    DEFAULT_LR_SCALE,
    MLP_SECTIONS,
    RUNTIME_KEYS,
    SECTIONS,
    DataConfig,
    NetworkConfig,
    ODEConfig,
    PluginsConfig,
    TargetConfig,
    TrainingConfig,
)
