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
    # sacrebleu takes the precisions' geometric mean as exp(mean of logs): a perfect
    # translation scores 100.00000000000004, which no BLEU score can be (and the records
    # refuse). Rounding is all that is taken off: no score is moved by more than 1e-9.
    return min(score.score, 100.0), str(metric.get_signature())
