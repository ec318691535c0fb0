"""The engine simulator: vLLM-compatible engines without a GPU, in real and virtual time.

Model: ``profile`` (device profiles from YAML), ``timing`` (roofline step time),
``seq`` + ``core`` (continuous batching over a paged KV cache; ``decode_run`` sizes its
fast-forward), ``textgen`` (tokenizer stand-in, deterministic text). Real time: ``engine``
(one engine's state: core on the ``realtime`` clock, ``metrics`` recorder, ``faults``,
``handoff`` KV store and slots), under the HTTP front end ``server`` (routes), with
``api_request`` / ``api_format`` / ``llama_format`` / ``llama_server`` (request bodies and
the engines' formats), ``generation`` (one request end to end) and ``slots`` (llama.cpp
slot endpoints); ``promtext`` writes /metrics, ``serve`` runs uvicorn. Virtual time:
``runner`` (the conductor) + ``virtual_engine`` + ``traces`` + ``report``. Command line:
``command`` (``python -m sim``), ``replay_cli``, ``errors``, ``cli`` (``syshax sim``).
``calibration`` checks profiles against published measurements; ``launch`` starts
simulator processes for tests, the demo and benchmarks. See docs/simulator.md.
"""
