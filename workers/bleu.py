"""BLEU of the translation tasks (4a, 4b), scored by sacrebleu on detokenised text.

The score is corpus BLEU with sacrebleu's defaults (13a tokenisation,
exponential smoothing off, case-sensitive); its signature string (version,
tokeniser, smoothing, ...) is recorded next to every score so that numbers
from different set-ups are never compared blindly.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """(BLEU in 0–100, sacrebleu signature) of detokenised ``hypotheses`` against one
    reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    metric = BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())
