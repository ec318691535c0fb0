"""The engine simulator: vLLM-compatible engines without a GPU, in real and virtual time.

Model: ``profile`` (device profiles from YAML), ``timing`` (roofline step time),
``seq`` + ``core`` (continuous batching over a paged KV cache), ``textgen`` (tokenizer
stand-in, deterministic text). HTTP front end: ``server`` (routes), ``api_request`` /
``api_format`` / ``generation`` (OpenAI bodies, vLLM's formats, handoffs), ``metrics`` /
``promtext`` (/metrics dialects), ``faults``, ``handoff`` + ``slots`` (shared KV, llama.cpp
slots), ``realtime`` (the scaled wall clock), ``serve`` (uvicorn). Virtual time:
``runner`` + ``traces`` + ``report``. ``calibration`` checks profiles against published
measurements; ``launch`` starts simulator processes for tests, the demo and benchmarks.
See docs/simulator.md.
"""
