"""`specguard serve`: an OpenAI-compatible server for chat models (`app.py`)."""

from .app import Served, build_app, prompt_counter

__all__ = ["Served", "build_app", "prompt_counter"]
