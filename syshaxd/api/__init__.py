"""The OpenAI-compatible HTTP API on the conductor's TCP port."""
