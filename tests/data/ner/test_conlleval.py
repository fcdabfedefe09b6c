"""data/ner/conlleval.py: the conlleval script's counts and report text, checked against a golden
file worked out by hand, against seqeval (an independent implementation) on random tags, and on
the script's input rules."""

import random
import warnings

import pytest

from data.ner import conlleval

TYPES = ("PER", "LOC", "MISC")
TAGS = ("O",) + tuple(f"{p}-{t}" for t in TYPES for p in "BI")

# Columns: word, POS, chunk, gold NE, guessed NE. Line numbers (1-based) are used below.
GOLDEN = """\
-DOCSTART- -X- -X- O O

EU NNP B-NP B-ORG B-ORG
rejects VBZ B-VP O O
German JJ B-NP B-MISC I-MISC
call NN I-NP O O
to TO B-VP O O
boycott VB I-VP O O
British JJ B-NP B-MISC B-MISC
lamb NN I-NP O O
. . O O O

Peter NNP B-NP B-PER B-PER
Blackburn NNP I-NP I-PER I-LOC
-X- -X- -X- O B-PER
BRUSSELS NNP B-NP B-LOC B-LOC
1996-08-22 CD I-NP O O
The DT B-NP O B-ORG
European NNP I-NP B-ORG I-ORG
Commission NNP I-NP I-ORG I-ORG
told VBD B-VP O O
Werner NNP B-NP B-PER B-PER
Zwingmann NNP I-NP I-PER I-PER
"""
# Worked out by hand:
# * tokens: 23 lines minus 3 boundaries (lines 2, 12, 15) = 20; -DOCSTART- (line 1) is one.
#   Wrong tags: German (B vs I), Blackburn (PER vs LOC), The, European: 16 right -> 80.00%.
# * gold chunks (7): ORG EU, MISC German, MISC British, PER Peter Blackburn, LOC BRUSSELS,
#   ORG European Commission, PER Werner Zwingmann.
# * guessed chunks (8): ORG EU, MISC German (I- after O starts one), MISC British, PER Peter
#   and LOC Blackburn (the type change inside the chunk ends PER and starts LOC), LOC BRUSSELS,
#   ORG The European Commission, PER Werner Zwingmann. Line 15 is a boundary: its guessed
#   B-PER is read as O and starts nothing.
# * correct (5): EU, German, British, BRUSSELS, Werner Zwingmann (closed by the end of input).
#   Peter: the guess ends at Blackburn, the gold does not. European Commission: the guess
#   starts one token earlier.
# * precision 5/8 = 62.50, recall 5/7 = 71.43, FB1 2*5/(8+7) = 66.67.
#   LOC 1/2, 1/1; MISC 2/2, 2/2; ORG 1/2, 1/2; PER 1/2, 1/2.
GOLDEN_REPORT = (
    "processed 20 tokens with 7 phrases; found: 8 phrases; correct: 5.\n"
    "accuracy:  80.00%; precision:  62.50%; recall:  71.43%; FB1:  66.67\n"
    "              LOC: precision:  50.00%; recall: 100.00%; FB1:  66.67  2\n"
    "             MISC: precision: 100.00%; recall: 100.00%; FB1: 100.00  2\n"
    "              ORG: precision:  50.00%; recall:  50.00%; FB1:  50.00  2\n"
    "              PER: precision:  50.00%; recall:  50.00%; FB1:  50.00  2\n"
)


def test_golden_file_counts_and_report(tmp_path):
    path = tmp_path / "golden.txt"
    path.write_text(GOLDEN, encoding="utf-8")
    result = conlleval.evaluate_file(str(path))

    assert (result.tokens, result.correct_tags) == (20, 16)
    assert (result.found_correct, result.found_guessed, result.correct_chunks) == (7, 8, 5)
    assert result.found_correct_by_type == {"ORG": 2, "MISC": 2, "PER": 2, "LOC": 1}
    assert result.found_guessed_by_type == {"ORG": 2, "MISC": 2, "PER": 2, "LOC": 2}
    assert result.correct_chunks_by_type == {"ORG": 1, "MISC": 2, "LOC": 1, "PER": 1}
    assert result.types == ["LOC", "MISC", "ORG", "PER"]
    assert result.report() == GOLDEN_REPORT

    assert result.precision == 62.5
    assert result.recall == pytest.approx(500 / 7, abs=1e-12)
    assert result.f1 == pytest.approx(200 / 3, abs=1e-12)
    assert result.accuracy == 80.0
    assert result.type_scores("LOC") == (50.0, 100.0, pytest.approx(200 / 3), 2)
    assert result.type_scores("NONE") == (0.0, 0.0, 0.0, 0)
    metrics = result.metrics()
    assert metrics["f1"] == result.f1 and metrics["accuracy"] == 80.0
    assert metrics["MISC_precision"] == 100.0 and metrics["LOC_recall"] == 100.0
    assert metrics["ORG_f1"] == 50.0 and metrics["LOC_count"] == 2
    assert len(metrics) == 4 + 4 * 4

    # The same text as lines; and as sentences of tags (the boundary line 15 splits sentence 2
    # from 3 and is not a token, the -DOCSTART- line is a sentence of one O token).
    assert conlleval.evaluate_lines(GOLDEN.splitlines()) == result
    rows = [line.split() for line in GOLDEN.splitlines()]
    sentences, current = [], []
    for row in rows:
        if not row or row[0] == "-X-":
            sentences.append(current)
            current = []
        else:
            current.append(row)
    sentences.append(current)
    gold = [[row[-2] for row in s] for s in sentences]
    guess = [[row[-1] for row in s] for s in sentences]
    assert conlleval.evaluate_tags(gold, guess) == result


def test_chunks_of_the_golden_guesses():
    assert conlleval.chunks(["B-PER", "I-LOC", "O", "I-MISC", "I-MISC"]) == [
        ("PER", 0, 1),
        ("LOC", 1, 2),
        ("MISC", 3, 5),
    ]
    assert conlleval.chunks([]) == [] and conlleval.chunks(["O", "O"]) == []


# ------------------------------------------------------------------------ against seqeval


def _seqeval():
    # seqeval imports scikit-learn, which warns on undefined scores: the values are compared.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from seqeval import metrics, scheme
        from seqeval.metrics import sequence_labeling
    return metrics, scheme, sequence_labeling


def _random_sentences(rng, well_formed):
    """1 to 3 sentences of 0 to 8 tags. Any tag anywhere (I- after O, I-X after B-Y), or
    IOB2 (an I-X only after B-X or I-X)."""
    sentences = []
    for _ in range(rng.randint(1, 3)):
        tags = []
        for _ in range(rng.randint(0, 8)):
            if well_formed:
                choices = ["O"] + [f"B-{t}" for t in TYPES]
                if tags and tags[-1] != "O":
                    choices.append("I-" + tags[-1][2:])
                tags.append(rng.choice(choices))
            else:
                tags.append(rng.choice(TAGS))
        sentences.append(tags)
    return sentences


def _assert_same_scores(metrics, gold, guess, **mode):
    ours = conlleval.evaluate_tags(gold, guess)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined precision/recall: seqeval gives 0, as we do
        theirs = (
            metrics.precision_score(gold, guess, **mode),
            metrics.recall_score(gold, guess, **mode),
            metrics.f1_score(gold, guess, **mode),
        )
    mine = (ours.precision / 100, ours.recall / 100, ours.f1 / 100)
    assert mine == pytest.approx(theirs, abs=1e-12, rel=0), (gold, guess, mode)
    return ours


# By experiment (20,000 random pairs over TAGS, ill-formed included): seqeval's default mode
# agrees with conlleval on every pair and every chunk, so nothing is excluded here. seqeval
# does differ outside this alphabet, where it follows IOBES rules that the 2004 script lacks
# (see test_s_and_e_tags_follow_the_2004_script).
def test_random_tags_agree_with_seqeval_default_mode():
    metrics, _, sequence_labeling = _seqeval()
    rng = random.Random(20040126)
    found = correct = 0
    for _ in range(2000):
        gold = _random_sentences(rng, well_formed=False)
        guess = [[rng.choice(TAGS) for _ in s] for s in gold]
        ours = _assert_same_scores(metrics, gold, guess)
        found += ours.found_guessed
        correct += ours.correct_chunks
        for tags in gold + guess:
            entities = sequence_labeling.get_entities(tags)
            # seqeval's end is inclusive
            assert conlleval.chunks(tags) == [(t, b, e + 1) for t, b, e in entities], tags
    assert found > 10000 and correct > 2000  # the comparison saw many chunks, matched and not


def test_well_formed_tags_agree_with_seqeval_strict_iob2():
    metrics, scheme, _ = _seqeval()
    rng = random.Random(7)
    correct = 0
    for _ in range(500):
        gold = _random_sentences(rng, well_formed=True)
        # a guess that shares chunks with the gold often: keep a sentence, or draw a new one
        guess = [
            list(s) if rng.random() < 0.3 else _random_sentences_of_length(rng, len(s))
            for s in gold
        ]
        _assert_same_scores(metrics, gold, guess)
        ours = _assert_same_scores(metrics, gold, guess, mode="strict", scheme=scheme.IOB2)
        correct += ours.correct_chunks
    assert correct > 1000


def _random_sentences_of_length(rng, length):
    tags = []
    while len(tags) < length:
        tags = [t for s in _random_sentences(rng, well_formed=True) for t in s][:length]
    return tags


def test_s_and_e_tags_follow_the_2004_script():
    # The 2004 script has no S-/E- rules of its own beyond (E,E) (E,I) (E,O): S-PER S-PER and
    # E-PER B-PER are one chunk for it (its type-change rule does not fire), two for seqeval.
    assert conlleval.chunks(["S-PER", "S-PER"]) == [("PER", 0, 2)]
    assert conlleval.chunks(["E-PER", "B-PER"]) == [("PER", 0, 2)]
    assert conlleval.chunks(["S-PER", "S-LOC", "O"]) == [("PER", 0, 1), ("LOC", 1, 2)]
    result = conlleval.evaluate_tags([["S-PER", "S-PER"]], [["B-PER", "I-PER"]])
    assert (result.found_correct, result.found_guessed, result.correct_chunks) == (1, 1, 1)


# ------------------------------------------------------------------------ the input rules


def test_accuracy_skips_boundaries_but_counts_docstart():
    lines = [
        "-DOCSTART- -X- O B-PER",  # a token (wrong), not a boundary
        "",
        "a x B-PER B-PER",
        "-X- -X- B-PER B-PER",  # a boundary: not a token, tags read as O O
        "b x B-LOC O",
        "   ",  # whitespace only: a boundary
    ]
    result = conlleval.evaluate_lines(lines)
    assert (result.tokens, result.correct_tags) == (3, 1)
    assert result.accuracy == pytest.approx(100 / 3)
    assert result.found_guessed_by_type == {"PER": 2}  # DOCSTART's and a's, not the boundary's
    assert result.found_correct_by_type == {"PER": 1, "LOC": 1}
    assert result.correct_chunks == 1


def test_wrong_column_count_names_source_and_line():
    lines = ["", "a x B-PER B-PER", "b x O O", "", "c O O"]
    with pytest.raises(ValueError, match=r"^preds\.txt:5: expected 4 columns, got 3 ") as err:
        conlleval.evaluate_lines(lines, source="preds.txt")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^<lines>:2: expected at least 2 columns"):
        conlleval.evaluate_lines(["", "lonely", "more"])


def test_file_errors_name_the_path(tmp_path):
    path = tmp_path / "valid.predictions.txt"
    path.write_bytes(b"a B-PER B-PER\r\n\nb O O\nc x O O\n")
    with pytest.raises(ValueError, match=r"valid\.predictions\.txt:4: expected 3 columns, got 4"):
        conlleval.evaluate_file(str(path))


def test_evaluate_tags_equals_evaluate_lines():
    rng = random.Random(3)
    for _ in range(200):
        gold = _random_sentences(rng, well_formed=False)
        guess = [[rng.choice(TAGS + ("B-ORG-X", "S-LOC", "E-PER", ".")) for _ in s] for s in gold]
        lines = []
        for g_sentence, p_sentence in zip(gold, guess):
            lines += [f"w {g} {p}" for g, p in zip(g_sentence, p_sentence)] + [""]
        from_lines = conlleval.evaluate_lines(lines)
        from_tags = conlleval.evaluate_tags(gold, guess)
        assert from_tags == from_lines
        assert from_tags.report() == from_lines.report()


def test_evaluate_tags_rejects_mismatched_input():
    with pytest.raises(ValueError, match="sentence 2: 1 gold tags but 2 guessed"):
        conlleval.evaluate_tags([["O"], ["O"]], [["O"], ["O", "O"]])
    with pytest.raises(ValueError, match="2 gold sentences but 1 guessed"):
        conlleval.evaluate_tags([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="is a string"):
        conlleval.evaluate_tags(["B-PER"], ["B-PER"])
    with pytest.raises(ValueError, match="token 1: tag 'B PER'"):
        conlleval.evaluate_tags([["B PER"]], [["O"]])


def test_script_quirks():
    # 2004-01-26: a tag splits at its first hyphen, so a type may contain hyphens.
    result = conlleval.evaluate_lines(["w B-ORG-X B-ORG-X", "w B-ORG B-ORG"])
    assert result.types == ["ORG", "ORG-X"] and result.correct_chunks == 2
    # `$type ? $type : ""`: the type "0" is false in Perl, so no type.
    assert conlleval.chunks(["B-0", "I"]) == [("", 0, 2)]
    # Typeless chunks on both sides: the script's de-duplication prints their line twice.
    report = conlleval.evaluate_lines(["w B B", "w O B-PER"]).report()
    assert report == (
        "processed 2 tokens with 1 phrases; found: 2 phrases; correct: 1.\n"
        "accuracy:  50.00%; precision:  50.00%; recall: 100.00%; FB1:  66.67\n"
        "                 : precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "                 : precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n"
    )
    # (O,I) starts a chunk even with no type to change (a bare I after O).
    assert conlleval.chunks(["O", "I"]) == [("", 1, 2)]
    # A chunk that both sides opened together stops being correct where the types differ,
    # even when neither side ends there: at token 3 gold "." -> "S-PER" does not end (no rule
    # for a "." before) and guessed "S" -> "]" does not end (no pair rule, no type change).
    result = conlleval.evaluate_tags([["I", ".", "S-PER"]], [["I", "S", "]"]])
    assert (result.found_correct, result.found_guessed, result.correct_chunks) == (2, 2, 0)
    # No tokens: only the first line, no scores.
    empty = conlleval.evaluate_lines([])
    assert empty.report() == "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
    assert (empty.precision, empty.recall, empty.f1, empty.accuracy) == (0.0, 0.0, 0.0, 0.0)
