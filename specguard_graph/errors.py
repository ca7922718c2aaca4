"""Typed errors, so callers (and the CLI) can tell bad input from a bug."""

from __future__ import annotations


class SpecGuardError(Exception):
    """Base class: everything the library raises on purpose derives from it."""


class ConfigError(SpecGuardError, ValueError):
    """A configuration value is out of range or inconsistent."""


class InputError(SpecGuardError, ValueError):
    """The question or another run input is unusable (empty, not text, too long)."""


class ModelLoadError(SpecGuardError, OSError):
    """A model path is missing, unreadable, not a model, or fails its checksum."""
