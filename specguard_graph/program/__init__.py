"""Program steps: Python a model writes is run for real, and its result is an observation and a
signal (docs/design.md, "Program steps")."""
