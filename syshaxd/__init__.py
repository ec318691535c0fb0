"""syshax daemon: one OpenAI-compatible endpoint in front of a GPU and a CPU inference engine."""

from __future__ import annotations

__version__ = "0.1.0"
