"""The routes an engine answers besides generation: tokenize, detokenize, embeddings, score, rerank.

vLLM dialects: ``POST /tokenize``, ``/detokenize`` (:mod:`sim.tokenize_api`),
``/v1/embeddings``, ``/score`` and ``/v1/score``, ``/rerank``, ``/v1/rerank`` and
``/v2/rerank`` (:mod:`sim.pooling_api`). They are answered at once, outside the
engine's batch (the simulator models generation only), and not subject to the
generation faults. The ids' suffix is the ``X-Request-Id`` header when sent, as vLLM
does. ``llamacpp``: ``/tokenize`` and ``/detokenize`` in llama-server's shapes; its
embedding and rerank routes answer 501 ``not_supported_error``, as llama-server does
unless started with ``--embeddings`` / ``--reranking`` (which would make it an
embedding or reranking server only, not a generation server).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sim import pooling_api, tokenize_api
from sim.api_request import ApiError, parse_body
from sim.engine import SimEngine
from sim.tokenizer import llama_vocab

ErrorReply = Callable[[ApiError], Response]
LLAMA_EMBEDDING_ROUTES = ("/embedding", "/embeddings", "/v1/embeddings")
LLAMA_RERANK_ROUTES = ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")


class UtilityRoutes:
    """The handlers of one engine's utility routes, in its dialect."""

    def __init__(self, engine: SimEngine, error: ErrorReply) -> None:
        self.engine = engine
        self.error = error
        self.llama = engine.dialect == "llamacpp"
        self.vocab = llama_vocab(engine.model_file.n_vocab)

    def routes(self) -> list[Route]:
        """This dialect's routes."""
        routes = [Route("/tokenize", self.tokenize, methods=["POST"]),
                  Route("/detokenize", self.detokenize, methods=["POST"])]
        if self.llama:
            routes += [Route(path, self.no_embeddings, methods=["POST"]) for path in LLAMA_EMBEDDING_ROUTES]
            routes += [Route(path, self.no_reranking, methods=["POST"]) for path in LLAMA_RERANK_ROUTES]
            return routes
        routes.append(Route("/v1/embeddings", self.embeddings, methods=["POST"]))
        routes += [Route(path, self.score, methods=["POST"]) for path in ("/score", "/v1/score")]
        routes += [Route(path, self.rerank, methods=["POST"]) for path in ("/rerank", "/v1/rerank", "/v2/rerank")]
        return routes

    async def _answer(self, request: Request, build: Callable[[dict[str, Any], str], dict[str, Any]]) -> Response:
        """Parse the body, build the answer; errors in the dialect's shape."""
        try:
            body = parse_body(await request.body(), llama=self.llama)
            given = body.get("request_id")
            default = given if isinstance(given, str) and not self.llama else uuid.uuid4().hex
            return JSONResponse(build(body, request.headers.get("x-request-id", default)))
        except ApiError as exc:
            return self.error(exc)

    async def tokenize(self, request: Request) -> Response:
        """POST /tokenize."""
        e = self.engine
        if self.llama:
            return await self._answer(request, lambda body, _: tokenize_api.llama_tokenize(body, self.vocab))
        return await self._answer(request, lambda body, _: tokenize_api.vllm_tokenize(
            body, e.opts.served_model_name, e.context_limit))

    async def detokenize(self, request: Request) -> Response:
        """POST /detokenize."""
        if self.llama:
            return await self._answer(request, lambda body, _: tokenize_api.llama_detokenize(body, self.vocab))
        served = self.engine.opts.served_model_name
        return await self._answer(request, lambda body, _: tokenize_api.vllm_detokenize(body, served))

    async def embeddings(self, request: Request) -> Response:
        """POST /v1/embeddings (vLLM)."""
        e = self.engine
        return await self._answer(request, lambda body, rid: pooling_api.embeddings(
            body, served_model=e.opts.served_model_name, max_model_len=e.context_limit,
            dimensions=e.profile.hidden_size, request_id=rid, created=int(time.time())))

    async def score(self, request: Request) -> Response:
        """POST /score, /v1/score (vLLM)."""
        served = self.engine.opts.served_model_name
        return await self._answer(request, lambda body, rid: pooling_api.score(
            body, served_model=served, request_id=rid, created=int(time.time())))

    async def rerank(self, request: Request) -> Response:
        """POST /rerank, /v1/rerank, /v2/rerank (vLLM)."""
        served = self.engine.opts.served_model_name
        return await self._answer(request, lambda body, rid: pooling_api.rerank(
            body, served_model=served, request_id=rid))

    async def no_embeddings(self, request: Request) -> Response:
        """llama-server's embedding routes, started without ``--embeddings``."""
        return self.error(ApiError("This server does not support embeddings. Start it with `--embeddings`", 501,
                                   "not_supported_error"))

    async def no_reranking(self, request: Request) -> Response:
        """llama-server's rerank routes, started without ``--reranking``."""
        return self.error(ApiError("This server does not support reranking. Start it with `--reranking`", 501,
                                   "not_supported_error"))
