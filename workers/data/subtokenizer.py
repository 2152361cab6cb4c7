"""The Tensor2Tensor-style subword vocabulary of WMT17 (Task 4b): built as the MLPerf
Transformer reference builds its ``wmt32k`` vocabulary, and the encoding it defines.

No maintained package ships this tokenizer, so it is written here. What it does:

- **Tokens.** Text splits wherever it changes between letters-or-digits (Unicode categories
  L and N) and everything else; a single space between two word tokens is dropped
  (:func:`split_tokens`), and put back when they are joined (:func:`join_tokens`).
- **Escaping.** A token's ``\\`` becomes ``\\\\``, its ``_`` becomes ``\\u``, a character
  outside the alphabet becomes ``\\<code point>;``, and ``_`` marks its end
  (:func:`escape`), so that every token can be written with the vocabulary's subtokens.
- **Counting.** The words of each training file are counted on a sample of it: about
  ``char_limit`` characters (stripped lines) taken at even steps through the file
  (:func:`count_tokens`; the reference's default, a million characters a file).
- **Building** (:func:`build_vocabulary`). Four rounds, starting from the alphabet. In each,
  every word (escaped) is cut greedily, longest match first, into the current subtokens, and
  every substring that starts where one of its pieces starts is counted, weighted by the
  word's count. Candidates with at least ``min_count`` are then taken longest first; taking
  one removes its count from each of its prefixes, so a prefix survives only when it is
  frequent on its own. The new vocabulary is the reserved tokens, then the candidates and the
  alphabet by decreasing count (ties: the larger string first).
- **Encoding** is the same greedy longest match, with the vocabulary's longest subtoken as
  the bound; decoding joins the pieces, cuts at ``_`` and undoes the escapes.

``tests/test_wmt17_preparation.py`` compares the vocabularies built here with those the
reference's own code builds on a fixed corpus, and the encoding with ``mlbench-core``
3.0.0's ``Subtokenizer``.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

RESERVED = ("<pad>", "<EOS>")  # ids 0 and 1 of the reference's vocabulary
ESCAPE_CHARACTERS = frozenset("\\_u;0123456789")
ROUNDS = 4
_UNESCAPE = re.compile(r"\\u|\\\\|\\([0-9]+);")
_UNDEFINED = "\u3013"


@lru_cache(maxsize=1 << 16)
def is_word_character(character: str) -> bool:
    """A letter or a digit of any script (Unicode categories L*, N*)."""
    return unicodedata.category(character)[0] in "LN"


def split_tokens(text: str) -> list[str]:
    """``text`` cut where it changes between word characters and the rest; a lone space
    between two words is not kept (it is implied)."""
    if not text:
        return []
    tokens: list[str] = []
    start = 0
    word = [is_word_character(c) for c in text]
    for position in range(1, len(text)):
        if word[position] != word[position - 1]:
            token = text[start:position]
            if token != " " or start == 0:
                tokens.append(token)
            start = position
    tokens.append(text[start:])
    return tokens


def join_tokens(tokens: Sequence[str]) -> str:
    """The text of ``tokens``: a space between two adjacent word tokens."""
    pieces: list[str] = []
    for i, token in enumerate(tokens):
        if i and is_word_character(tokens[i - 1][0]) and is_word_character(token[0]):
            pieces.append(" ")
        pieces.append(token)
    return "".join(pieces)


def escape(token: str, alphabet: frozenset[str] | set[str]) -> str:
    """``token`` written in ``alphabet``, ``_`` at its end (the module docstring)."""
    token = token.replace("\\", "\\\\").replace("_", "\\u")
    kept = (c if c in alphabet and c != "\n" else f"\\{ord(c)};" for c in token)
    return "".join(kept) + "_"


def unescape(token: str) -> str:
    def replaced(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "_" if match.group(0) == "\\u" else "\\"
        try:
            return chr(int(match.group(1)))
        except (ValueError, OverflowError):
            return _UNDEFINED

    return _UNESCAPE.sub(replaced, token)


def count_tokens(files: Iterable[Path], char_limit: int = 1_000_000) -> Counter[str]:
    """The words of a sample of each file: stripped lines at even steps through it, until
    about ``char_limit`` characters are taken (the step: the file's bytes over twice it)."""
    counts: Counter[str] = Counter()
    for path in files:
        budget = float(char_limit)
        skip = int(os.path.getsize(path) / (budget * 2))
        skipped = 0
        with open(path, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                if skipped < skip:
                    skipped += 1
                    continue
                if budget < 0:
                    break
                line = line.strip()
                budget -= len(line)
                skipped = 0
                counts.update(split_tokens(line))
    return counts


def alphabet_of(tokens: Iterable[str], reserved: Sequence[str] = RESERVED) -> frozenset[str]:
    """Every character of ``tokens`` and of the reserved tokens, and the escape characters."""
    characters = {c for token in tokens for c in token}
    characters |= {c for token in reserved for c in token}
    return frozenset(characters | ESCAPE_CHARACTERS)


def greedy_pieces(token: str, vocabulary: dict[str, int], longest: int) -> list[str]:
    """``token`` cut into vocabulary subtokens, the longest that fits first."""
    pieces: list[str] = []
    start = 0
    while start < len(token):
        for end in range(min(len(token), start + longest), start, -1):
            if token[start:end] in vocabulary:
                pieces.append(token[start:end])
                start = end
                break
        else:
            raise ValueError(f"cannot cut {token!r} into subtokens")
    return pieces


def _substring_counts(
    counts: Counter[str], alphabet: frozenset[str], vocabulary: dict[str, int], longest: int
) -> defaultdict[str, int]:
    found: defaultdict[str, int] = defaultdict(int)
    for word, count in counts.items():
        escaped = escape(word, alphabet)
        start = 0
        for piece in greedy_pieces(escaped, vocabulary, longest):
            for end in range(start + 1, len(escaped) + 1):
                found[escaped[start:end]] += count
            start += len(piece)
    return found


def _candidates(
    found: defaultdict[str, int],
    min_count: int,
    alphabet: frozenset[str],
    reserved: Sequence[str],
) -> tuple[list[str], int]:
    by_length: list[set[str]] = []
    for subtoken, count in found.items():
        if count >= min_count:
            while len(by_length) <= len(subtoken):
                by_length.append(set())
            by_length[len(subtoken)].add(subtoken)
    longest = len(by_length) - 1
    chosen: list[tuple[int, str]] = []
    for length in range(longest, 0, -1):
        for subtoken in by_length[length]:
            count = found[subtoken]
            if count < min_count:
                continue  # most of its count went to longer subtokens
            if subtoken not in alphabet and subtoken not in reserved:
                chosen.append((count, subtoken))
            for end in range(1, length):
                found[subtoken[:end]] -= count
    chosen.extend((found.get(character, 0), character) for character in alphabet)
    ordered = [subtoken for _, subtoken in sorted(chosen, reverse=True)]
    return [*reserved, *ordered], longest


def build_vocabulary(
    counts: Counter[str], min_count: int, reserved: Sequence[str] = RESERVED
) -> list[str]:
    """The subtoken vocabulary of word ``counts`` (the module docstring's four rounds)."""
    alphabet = alphabet_of(counts, reserved)
    vocabulary = [*reserved, *sorted(alphabet)]
    longest = 1
    for _ in range(ROUNDS):
        index = {subtoken: i for i, subtoken in enumerate(vocabulary)}
        found = _substring_counts(counts, alphabet, index, longest)
        vocabulary, longest = _candidates(found, min_count, alphabet, reserved)
    return vocabulary


def write_vocabulary(path: Path, vocabulary: Sequence[str]) -> None:
    """One subtoken a line, in single quotes: the reference's vocabulary file."""
    path.write_text("".join(f"'{subtoken}'\n" for subtoken in vocabulary), encoding="utf-8")


def read_vocabulary(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as handle:
        return [line.strip()[1:-1] for line in handle]


class Subtokenizer:
    """Text to subtoken ids and back, with a vocabulary as :func:`build_vocabulary` gives."""

    def __init__(self, vocabulary: Sequence[str], reserved: Sequence[str] = RESERVED) -> None:
        self.vocabulary = list(vocabulary)
        self.index = {subtoken: i for i, subtoken in enumerate(self.vocabulary)}
        self.alphabet = alphabet_of(self.vocabulary, reserved)
        self.longest = max(len(subtoken) for subtoken in self.vocabulary)
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s subtokens (no end-of-sentence id)."""
        ids: list[int] = []
        for token in split_tokens(text):
            known = self._cache.get(token)
            if known is None:
                pieces = greedy_pieces(escape(token, self.alphabet), self.index, self.longest)
                known = [self.index[piece] for piece in pieces]
                if len(self._cache) < 1 << 20:
                    self._cache[token] = known
            ids.extend(known)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of subtoken ids (ids past the vocabulary are dropped)."""
        pieces = "".join(self.vocabulary[i] for i in ids if 0 <= i < len(self.vocabulary))
        return join_tokens([unescape(token) for token in pieces.split("_") if token])
