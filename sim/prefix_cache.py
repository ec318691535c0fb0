"""vLLM's automatic prefix caching, over the hashed prompt blocks a trace names.

vLLM keeps the KV blocks of every request, running or finished, under the hash of their
tokens chained with the hashes before them, and a new request starts from the longest
run of its leading blocks found there. Blocks a running request references cannot go;
blocks nobody references stay cached in the free pool and are evicted, least recently
freed first, only when an allocation needs them (a request frees its blocks last to
first, so a prompt's tail goes before its head).

Here the unit is a trace's block (``SimRequest.prefix``: one hash id per
``prefix_block`` tokens, the last one possibly partial), its key is the chain of ids up to
it, and its size is the engine blocks it fills (only whole engine blocks are cached). The
core owns the memory: ``EngineCore.free_blocks`` counts free blocks with or without
cached content, ``evictable`` is how many of them hold cached content, and the core
calls :meth:`PrefixCache.evict` whenever an allocation leaves fewer free blocks than that.
A sequence's ``blocks`` are all the blocks it uses; ``shared`` of them are cached blocks
it references (``held``), the rest are its own. Only prompt blocks a trace names are
cached: output tokens have no hash in a trace. Two requests that compute the same block
at the same time keep two copies; the second copy stays its request's own.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sim.seq import Seq


@dataclass(frozen=True)
class Match:
    """The leading cached blocks of a sequence's prefix, and where the sequence starts."""

    blocks: int  # trace blocks found
    engine_blocks: int  # engine blocks they fill
    from_free: int  # of those, blocks now in the free pool (referencing them takes them out)
    cached: int  # tokens the sequence need not compute: theirs, but never its last token


class PrefixCache:
    """Cached prompt blocks of one engine: referenced ones and, in LRU order, free ones."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.referenced: dict[int, list[int]] = {}  # key -> [references, engine blocks]
        self.free: OrderedDict[int, int] = OrderedDict()  # key -> engine blocks, least recently freed first
        self.evictable = 0  # engine blocks in ``free``

    def chain(self, seq: Seq) -> None:
        """Give ``seq`` its blocks' keys and end tokens (once; a no-op without a prefix)."""
        if seq.chain or not seq.req.prefix:
            return
        size, bs, limit = seq.req.prefix_block, self.block_size, seq.req.context_tokens
        keys: list[int] = []
        ends: list[int] = []
        key = size  # blocks of another size never match
        for i, hash_id in enumerate(seq.req.prefix):
            end = min((i + 1) * size, limit) // bs * bs
            if ends and end <= ends[-1] or not ends and end == 0:
                break  # fills no whole engine block of its own: never cached
            key = hash((key, hash_id))
            keys.append(key)
            ends.append(end)
        seq.chain, seq.ends = tuple(keys), tuple(ends)

    def match(self, seq: Seq) -> Match:
        """The longest run of ``seq``'s leading blocks found cached.

        As vLLM, the last token is always computed: at most ``num_tokens - 1`` are cached.
        """
        self.chain(seq)
        found, from_free = 0, 0
        for key in seq.chain:
            if key not in self.referenced:
                size = self.free.get(key)
                if size is None:
                    break
                from_free += size
            found += 1
        tokens = seq.ends[found - 1] if found else 0
        bs = self.block_size
        return Match(found, tokens // bs, from_free, min(tokens, (seq.num_tokens - 1) // bs * bs))

    def plan(self, seq: Seq, budget: int, free_blocks: int) -> Match | None:
        """Where a new ``seq`` would start; None when its first chunk (``budget`` tokens at most) does not fit."""
        match = self.match(seq)
        end = match.cached + min(seq.num_tokens - match.cached, budget)
        need = -(-end // self.block_size) - match.engine_blocks
        return match if need <= free_blocks - match.from_free else None

    def acquire(self, seq: Seq, match: Match) -> None:
        """Start ``seq`` after the blocks of ``match``, referencing them (free ones leave the free pool)."""
        for key in seq.chain[: match.blocks]:
            entry = self.referenced.get(key)
            if entry is None:
                size = self.free.pop(key)
                self.evictable -= size
                self.referenced[key] = [1, size]
            else:
                entry[0] += 1
            seq.held.append(key)
        seq.shared = seq.blocks = match.engine_blocks
        seq.num_computed = match.cached
        seq.prefix_done = match.blocks

    def insert(self, seq: Seq) -> None:
        """Cache ``seq``'s prefix blocks that are computed now (they become shared blocks)."""
        ends, i = seq.ends, seq.prefix_done
        while i < len(ends) and ends[i] <= seq.num_computed:
            key = seq.chain[i]
            if key not in self.referenced and key not in self.free:
                size = (ends[i] - (ends[i - 1] if i else 0)) // self.block_size
                self.referenced[key] = [1, size]
                seq.held.append(key)
                seq.shared += size
            i += 1
        seq.prefix_done = i

    def release(self, seq: Seq) -> int:
        """Drop ``seq``'s references, last block first; the engine blocks that became free."""
        freed = 0
        for key in reversed(seq.held):
            entry = self.referenced[key]
            entry[0] -= 1
            if entry[0] == 0:
                del self.referenced[key]
                self.free[key] = entry[1]
                freed += entry[1]
        self.evictable += freed
        seq.held.clear()
        seq.shared = 0
        return freed

    def evict(self, free_blocks: int) -> None:
        """Forget the least recently freed blocks until the free pool holds the rest."""
        while self.evictable > free_blocks:
            _, size = self.free.popitem(last=False)
            self.evictable -= size
