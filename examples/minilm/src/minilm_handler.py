"""The minilm package's request handler: a sentence in, its embedding out.

Owns the request format of the minilm function (`minilm_handler:Handler` in its manifest): the
body is the sentence as UTF-8 text, or a JSON string when the content type is
`application/json`; the answer is `{"embedding": [...], "dimensions": n}`. Tokenizes with the
package's `tokenizer.json` (the `tokenizers` library, no torch), truncated at 256 tokens as
sentence-transformers does for all-MiniLM-L6-v2, unpadded (the platform pads a batch).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from infless.handlers import Arrays, HandlerError, Request

TOKENIZER_FILE = "tokenizer.json"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2


class Handler:
    """Text → `input_ids`/`attention_mask` (int64 [T]); `embedding` → JSON."""

    def __init__(self, package_dir: Path) -> None:
        tokenizer = Tokenizer.from_str((package_dir / TOKENIZER_FILE).read_text(encoding="utf-8"))
        tokenizer.no_padding()  # the file asks for fixed padding to 128; a batch pads itself
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer = tokenizer

    def preprocess(self, request: Request) -> Arrays:
        text = _sentence(request)
        encoding = self._tokenizer.encode(text)
        return {
            "input_ids": np.asarray(encoding.ids, dtype=np.int64),
            "attention_mask": np.asarray(encoding.attention_mask, dtype=np.int64),
        }

    def postprocess(self, outputs: Arrays) -> object:
        embedding = np.asarray(outputs["embedding"], dtype=np.float32).reshape(-1)
        return {"embedding": embedding.tolist(), "dimensions": int(embedding.shape[0])}


def _sentence(request: Request) -> str:
    text = request.text()
    media_type = request.content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HandlerError(f"the body is not valid JSON: {exc}") from None
        if not isinstance(value, str):
            raise HandlerError(
                f"a JSON body must be a string (the sentence), not {type(value).__name__}"
            )
        text = value
    if not text.strip():
        raise HandlerError("the body is empty: send the sentence to embed as UTF-8 text")
    return text
