"""BLEU through sacrebleu, with the signature that travels with each score."""

from __future__ import annotations

import pytest

from workers.bleu import corpus_bleu


def test_a_perfect_translation_scores_100_and_not_a_rounding_above() -> None:
    """sacrebleu alone gives 100.00000000000004, which the records refuse as no BLEU score:
    a light Task 4a run that translated its test set perfectly failed so."""
    score, signature = corpus_bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."])
    assert score == 100.0
    texts = ["fast dog cat over tree", "cat house slow fast", "the red tree runs over a house"]
    assert corpus_bleu(texts, texts)[0] == 100.0
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_a_known_pair_scores_as_computed_by_hand() -> None:
    # 6 hypothesis tokens, 7 reference tokens; matches: 1-grams 5/6, 2-grams 3/5,
    # 3-grams 2/4, 4-grams 1/3; brevity penalty exp(1 - 7/6).
    import math

    hypothesis = "the cat sat on a mat"
    reference = "the cat sat on the red mat"
    expected = math.exp(1 - 7 / 6) * math.exp(
        (math.log(5 / 6) + math.log(3 / 5) + math.log(2 / 4) + math.log(1 / 3)) / 4
    )
    score, _ = corpus_bleu([hypothesis], [reference])
    assert score == pytest.approx(100 * expected, rel=1e-6)


def test_hypotheses_and_references_must_pair_up() -> None:
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        corpus_bleu(["a", "b"], ["a"])
