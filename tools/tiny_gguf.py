"""Generate a tiny random-weight llama GGUF that a real llama-server loads.

The output is gibberish, but every token is really computed, batched and cached, which is
all the integration tests need. The tokenizer comes from a vocab-only GGUF shipped with
llama.cpp, so prompts tokenize like a real model's. The same seed gives the same bytes.

    python tools/tiny_gguf.py --vocab .../ggml-vocab-llama-spm.gguf --out tiny.gguf
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ARCH = "llama"
#: Bump when the output bytes change, so cached models from older generators are not reused.
GENERATOR_VERSION = 1

# ChatML-like: the llama-spm vocabulary has no <|im_start|> token, so the markers are
# tokenized as plain text; that is fine for a model whose output is noise anyway.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """Shape of the generated model."""

    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 256
    n_ctx_train: int = 4096
    seed: int = 1234
    #: Layer weights much larger than the embedding make the output depend on the whole
    #: context; at 0.02 everywhere greedy decoding just repeats the last prompt token, and a
    #: test comparing two runs could not tell a working KV cache from a broken one.
    embd_std: float = 0.02
    layer_std: float = 0.2
    name: str = "syshax-tiny-llama"

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.n_embd // self.n_head


class TinyModelError(Exception):
    """A user-facing problem generating the model (bad vocab file, bad spec)."""


def _copy_tokenizer(writer: Any, vocab_path: Path) -> int:
    """Copy every tokenizer.* key from a vocab-only GGUF; return the vocabulary size."""
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(vocab_path)
    except (OSError, ValueError) as exc:
        raise TinyModelError(f"cannot read vocab GGUF {vocab_path}: {exc}") from exc
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            values = field.contents()
            sub = field.types[-1]
            writer.add_key_value(key, values, vtype, sub_type=sub)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        else:
            writer.add_key_value(key, field.contents(), vtype)
    if n_vocab == 0:
        raise TinyModelError(f"{vocab_path} has no tokenizer.ggml.tokens array")
    return n_vocab


def generate(vocab_path: Path, out_path: Path, spec: TinySpec = TinySpec()) -> Path:
    """Write the tiny model to out_path (atomically) and return it."""
    from gguf import GGUFWriter, LlamaFileType

    if spec.n_embd % spec.n_head or spec.n_head % spec.n_head_kv:
        raise TinyModelError("n_embd must divide by n_head, and n_head by n_head_kv")
    if not vocab_path.is_file():
        raise TinyModelError(f"vocab GGUF not found: {vocab_path}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".part")
    rng = np.random.default_rng(spec.seed)

    writer = GGUFWriter(str(tmp), ARCH)
    writer.add_name(spec.name)
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(LlamaFileType.MOSTLY_F16)
    n_vocab = _copy_tokenizer(writer, vocab_path)
    writer.add_vocab_size(n_vocab)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape: int, std: float = spec.layer_std) -> np.ndarray[Any, Any]:
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)

    def norm() -> np.ndarray[Any, Any]:
        return np.ones(spec.n_embd, dtype=np.float32)

    kv_width = spec.n_head_kv * spec.head_dim
    # No output.weight: llama.cpp then ties the output head to token_embd, halving the file.
    writer.add_tensor("token_embd.weight", weight(n_vocab, spec.n_embd, std=spec.embd_std))
    writer.add_tensor("output_norm.weight", norm())
    for i in range(spec.n_layer):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", norm())
        writer.add_tensor(f"{blk}.attn_q.weight", weight(spec.n_embd, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_k.weight", weight(kv_width, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_v.weight", weight(kv_width, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_output.weight", weight(spec.n_embd, spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_norm.weight", norm())
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(spec.n_ff, spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(spec.n_ff, spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(spec.n_embd, spec.n_ff))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out_path)
    return out_path


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vocab", type=Path, required=True, help="vocab-only GGUF to copy")
    parser.add_argument("--out", type=Path, required=True, help="where to write the model")
    parser.add_argument("--seed", type=int, default=TinySpec.seed)
    args = parser.parse_args(argv)
    try:
        path = generate(args.vocab, args.out, TinySpec(seed=args.seed))
    except TinyModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
