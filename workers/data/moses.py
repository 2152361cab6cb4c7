"""The Moses steps of the WMT16 preparation, in Python: SGM to text, tokenization, corpus
cleaning and the reference's Latin-1 filter, and detokenization for BLEU.

Each does what its Perl script in ``moses-smt/mosesdecoder`` does (the MLPerf GNMT
reference runs them); ``tests/data/moses`` holds the scripts' own output on a fixed corpus,
which the tests compare with these functions':

- :func:`sgm_segments`: ``scripts/ems/support/input-from-sgm.perl``;
- :func:`tokenize`: ``scripts/tokenizer/tokenizer.perl -q -l LANG`` through ``sacremoses``,
  plus the one rule ``sacremoses`` leaves out: a line's last word loses its final period
  even when it is a known abbreviation (``a.m.`` at the end of a line is ``a.m .``). Perl
  leaves a space at the end of a line that ends in a quote; the tokens are the same;
- :func:`clean_pairs`: ``scripts/training/clean-corpus-n.perl CORPUS L1 L2 OUT 1 80``
  (whitespace collapsed, pipes removed, both sides 1–80 words, neither more than 9 times
  the other's words, no word over 1,000 characters). Tokenized text has no pipes
  (``&#124;``), so the script's factored mode never applies;
- :func:`latin1_pairs`: the reference's ``filter_dataset.py``, which keeps a pair only when
  both sides can be written in Latin-1 (it drops lines of other scripts and symbols).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

_SEG = re.compile(r"<seg[^>]+>\s*(.*)\s*</seg>", re.IGNORECASE)
_SEG_OPEN = re.compile(r"<seg[^>]+>\s*(.*)\s*$", re.IGNORECASE)
_SEG_BARE = re.compile(r"<seg[^>]+>\s*$", re.IGNORECASE)
_LAST_PERIOD = re.compile(r"(\S*[^.\s])\.")
_SPACES = re.compile(r"\s+")


def sgm_segments(lines: Iterable[str]) -> Iterator[str]:
    """The text of each ``<seg>`` of an SGM file, whitespace collapsed; a segment spread over
    lines is joined without a space, as the Perl script does."""
    source = iter(lines)
    for raw in source:
        line = raw.rstrip("\n")
        while _SEG_BARE.search(line) or (_SEG_OPEN.search(line) and not _SEG.search(line)):
            following = next(source, None)
            if following is None:
                break
            line += following.rstrip("\n")
        found = _SEG.search(line)
        if found:
            yield _SPACES.sub(" ", found.group(1)).strip(" ")


@lru_cache(maxsize=4)
def _tokenizer(lang: str) -> object:
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def tokenize(line: str, lang: str) -> str:
    """``line`` as Moses' ``tokenizer.perl -q -l lang`` tokenizes it (special characters
    escaped: ``&amp;``, ``&quot;``, ``&apos;``, ...)."""
    text = _tokenizer(lang).tokenize(line, return_str=True, escape=True)  # type: ignore[attr-defined]
    words = text.split()
    if words:
        last = _LAST_PERIOD.fullmatch(words[-1])
        if last and ".." not in words[-1]:
            words[-1] = f"{last.group(1)} ."
    return " ".join(words)


def tokenize_lines(lines: list[str], lang: str) -> list[str]:
    """:func:`tokenize` of every line (what one process of the pool does with its chunk)."""
    return [tokenize(line, lang) for line in lines]


MAX_WORD_CHARS = 1000  # clean-corpus-n's -max-word-length default


def _cleaned(line: str) -> str:
    return _SPACES.sub(" ", line.replace("|", "")).strip(" ")


def clean_pairs(
    pairs: Iterable[tuple[str, str]], shortest: int = 1, longest: int = 80, ratio: float = 9.0
) -> Iterator[tuple[str, str]]:
    """The pairs ``clean-corpus-n.perl`` keeps, each side cleaned as it writes them."""
    for first, second in pairs:
        a, b = _cleaned(first), _cleaned(second)
        if not a or not b:
            continue
        words_a, words_b = a.split(" "), b.split(" ")
        count_a, count_b = len(words_a), len(words_b)
        if not (shortest <= count_a <= longest and shortest <= count_b <= longest):
            continue
        if count_a / count_b > ratio or count_b / count_a > ratio:
            continue
        if any(len(word) > MAX_WORD_CHARS for word in (*words_a, *words_b)):
            continue
        yield a, b


def latin1_pairs(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """The pairs whose both sides can be written in Latin-1 (the reference's filter)."""
    for first, second in pairs:
        try:
            first.encode("latin-1")
            second.encode("latin-1")
        except UnicodeEncodeError:
            continue
        yield first, second


@lru_cache(maxsize=4)
def _detokenizer(lang: str) -> object:
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def detokenize(words: list[str], lang: str) -> str:
    """Plain text of Moses-tokenized ``words`` (escapes undone), as BLEU is scored on it."""
    return _detokenizer(lang).detokenize(words)  # type: ignore[attr-defined]
