"""A tokenizer stand-in for the trie: words split into two-character pieces, the first with its
leading space (like byte-level BPE marks word starts), ids handed out on first sight; special
tokens spelled in the text (``<|endoftext|>``) read as one special id, as Whisper's do."""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"(<\|[a-z]+\|>)")


class PieceTokenizer:
    """``" Niamh"`` → pieces ``" Ni"``, ``"am"``, ``"h"``; every piece gets a stable id."""

    eot = 50256
    specials = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>")

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.encoded: list[str] = []

    def id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab))

    def pieces(self, text: str) -> list[str]:
        out: list[str] = []
        for word in text.split(" "):
            if not word:
                continue
            head, rest = " " + word[:2], word[2:]
            out.append(head)
            out.extend(rest[i : i + 2] for i in range(0, len(rest), 2))
        return out

    def encode(self, text: str) -> list[int]:
        self.encoded.append(text)
        return [
            self.eot + self.specials.index(part) if part in self.specials else self.id(piece)
            for part in _SPECIAL.split(text)
            for piece in ([part] if part in self.specials else self.pieces(part))
        ]

    def decode(self, tokens: list[int]) -> str:
        names = {v: k for k, v in self.vocab.items()}
        return "".join(names[t] for t in tokens)
