"""Pre-training instances (masked LM + next sentence), step for step as the original.

This is the readable, faithful path, with the original create_pretraining_data.py's public
names; it works on WordPiece ids instead of token strings and takes any object with
``random()``, ``randint()`` and ``shuffle()`` as ``rng`` (normally ``random.Random(seed)``).
``data/pretraining/instances_fast.py`` produces the same records much faster; the tests check both
against the original's golden records and against each other.

Behaviours of the original reproduced here (see ``../shared/golden/README.md``):

* the documents are shuffled once (``rng.shuffle``) before the ``dupe_factor`` passes; every
  pass walks all documents in that order;
* ``target_seq_length`` is drawn once per document: ``max_seq_length - 3``, or with
  probability ``short_seq_prob`` ``randint(2, max_seq_length - 3)``;
* sentences are gathered until the chunk reaches the target (or the document ends); ``A`` is
  the first ``randint(1, len(chunk) - 1)`` sentences (1 for a one-sentence chunk); ``B`` is
  the rest (label 0), or, for a one-sentence chunk or when ``random() < 0.5``, sentences of a
  random document from a random sentence on until ``target - len(A)`` tokens (label 1); the
  random document is redrawn at most 10 times while it is the current one, so with one document
  it can be the same; the chunk's unused sentences are put back;
* ``truncate_seq_pair`` trims the longer side (``B`` on a tie) one token at a time, from the
  front when ``random() < 0.5``, else from the back;
* masking: candidates are all positions but [CLS]/[SEP] (with whole-word masking, a ``##``
  piece joins the group of the candidate before it, even across the middle [SEP]); they are
  shuffled; ``num_to_predict = min(max_predictions_per_seq, max(1, round(len * prob)))``
  (Python 3 round-half-to-even); groups are taken in shuffled order, skipping one that would
  exceed ``num_to_predict``; per position: ``random() < 0.8`` -> [MASK], else ``random() <
  0.5`` -> kept, else a random word ``vocab_words[randint(0, len(vocab_words) - 1)]`` of the
  whole vocab in file order (special and [unusedN] tokens included);
* all instances of all passes are shuffled together at the end, and written in that order,
  round-robin over the output files.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from bert_common.errors import InputError
from data.tokenization import special_tokens
from data.tokenization.wordpiece import VocabError

MAX_RANDOM_DOCUMENT_TRIES = 10


class PretrainingDataError(InputError):
    """Unusable flags or input for pre-training data; the message names the flag or file."""


@dataclasses.dataclass
class TrainingInstance:
    """A single training instance (sentence pair), as ids.

    ``tokens``: ``[CLS] A [SEP] B [SEP]`` after masking (length <= max_seq_length);
    ``segment_ids``: 0 for [CLS] A [SEP], 1 for B [SEP]; ``masked_lm_positions``: ascending
    positions of the predictions; ``masked_lm_labels``: the original ids there;
    ``is_random_next``: True when B is from a random document (label 1).

    Args:
        tokens: the token ids, after masking.
        segment_ids: the segment ids, one per token.
        masked_lm_positions: the predicted positions, ascending.
        masked_lm_labels: the original ids at those positions.
        is_random_next: B is from a random document.
    """

    tokens: List[int]
    segment_ids: List[int]
    masked_lm_positions: List[int]
    masked_lm_labels: List[int]
    is_random_next: bool


class PretrainingVocab:
    """What instance creation needs from the vocabulary, as ids.

    ``word_ids[k]`` is the id of the original's ``vocab_words[k]`` (``list(vocab.keys())``: the
    distinct tokens in file order; a token listed twice has its last index as id);
    ``is_subword[id]`` tells whether that token starts with ``##`` (whole-word masking).

    Args:
        vocab: token -> id, in file order.
        vocab_file: the vocab's path, for messages.

    Raises:
        VocabError: the vocab lacks ``[CLS]``, ``[SEP]`` or ``[MASK]``.
    """

    def __init__(self, vocab: Mapping[str, int], vocab_file: str = "vocab"):
        missing = [t for t in (special_tokens.CLS, special_tokens.SEP, special_tokens.MASK)
                   if t not in vocab]
        if missing:
            raise VocabError("vocab file %s has no %s token%s (needed for pre-training data)"
                             % (vocab_file, " / ".join(missing), "s" if len(missing) > 1 else ""))
        self.cls_id = vocab[special_tokens.CLS]
        self.sep_id = vocab[special_tokens.SEP]
        self.mask_id = vocab[special_tokens.MASK]
        self.word_ids = np.array([vocab[w] for w in vocab], dtype=np.int64)
        size = int(self.word_ids.max()) + 1
        self.is_subword = np.zeros(size, dtype=bool)
        for token, index in vocab.items():
            if token.startswith("##"):
                self.is_subword[index] = True

    @property
    def num_words(self) -> int:
        """``len(vocab_words)`` of the original."""
        return len(self.word_ids)


def check_settings(max_seq_length: int, max_predictions_per_seq: int, dupe_factor: int,
                   masked_lm_prob: float, short_seq_prob: float) -> None:
    """Raises PretrainingDataError naming the flag for a value the original cannot work with.

    Args:
        max_seq_length: ``--max_seq_length``.
        max_predictions_per_seq: ``--max_predictions_per_seq``.
        dupe_factor: ``--dupe_factor``.
        masked_lm_prob: ``--masked_lm_prob``.
        short_seq_prob: ``--short_seq_prob``.

    Raises:
        PretrainingDataError: a value out of range.
    """
    if max_seq_length < 5:
        raise PretrainingDataError(
            "--max_seq_length=%d is too small: [CLS] A [SEP] B [SEP] needs at least 5"
            % max_seq_length)
    if max_predictions_per_seq < 1:
        raise PretrainingDataError("--max_predictions_per_seq=%d must be at least 1"
                                   % max_predictions_per_seq)
    if dupe_factor < 1:
        raise PretrainingDataError("--dupe_factor=%d must be at least 1" % dupe_factor)
    if not 0.0 <= masked_lm_prob <= 1.0:
        raise PretrainingDataError("--masked_lm_prob=%g must be in [0, 1]" % masked_lm_prob)
    if not 0.0 <= short_seq_prob <= 1.0:
        raise PretrainingDataError("--short_seq_prob=%g must be in [0, 1]" % short_seq_prob)


def num_to_predict(seq_len: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    """``min(max_predictions_per_seq, max(1, int(round(seq_len * masked_lm_prob))))``.

    Args:
        seq_len: the number of tokens of the instance.
        masked_lm_prob: the share of tokens masked.
        max_predictions_per_seq: P.

    Returns:
        The number of masked positions.
    """
    return min(max_predictions_per_seq, max(1, int(round(seq_len * masked_lm_prob))))


def create_training_instances(input_files: Sequence[str], tokenizer, max_seq_length: int,
                              dupe_factor: int, short_seq_prob: float, masked_lm_prob: float,
                              max_predictions_per_seq: int, rng,
                              do_whole_word_mask: bool = False) -> List[TrainingInstance]:
    """All instances of ``dupe_factor`` passes over the documents of ``input_files``, shuffled.

    ``tokenizer``: a ``FullTokenizer`` / ``FastFullTokenizer`` (its ``vocab`` gives the special
    ids and the random words).

    Args:
        input_files: the corpus files.
        tokenizer: the tokenizer (above).
        max_seq_length: S.
        dupe_factor: the number of passes over the documents.
        short_seq_prob: the probability of a shorter target length.
        masked_lm_prob: the share of tokens masked.
        max_predictions_per_seq: P.
        rng: the ``random.Random`` (or ``WordStream``) of every draw.
        do_whole_word_mask: mask whole words.

    Returns:
        The instances, shuffled.
    """
    from data.pretraining.corpus import read_corpus

    vocab = PretrainingVocab(tokenizer.vocab, getattr(tokenizer, "vocab_file", "vocab"))
    all_documents = read_corpus(input_files, tokenizer).documents()
    return create_instances_from_documents(
        all_documents, vocab, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
        max_predictions_per_seq, rng, do_whole_word_mask)


def create_instances_from_documents(all_documents: List[List[List[int]]],
                                    vocab: PretrainingVocab, max_seq_length: int,
                                    dupe_factor: int, short_seq_prob: float,
                                    masked_lm_prob: float, max_predictions_per_seq: int, rng,
                                    do_whole_word_mask: bool = False) -> List[TrainingInstance]:
    """``create_training_instances`` after reading: ``all_documents`` (lists of sentences of
    ids, none empty, in reading order, as ``Corpus.documents()``) is shuffled in place, then
    ``dupe_factor`` passes create the instances, which are shuffled together.

    Args:
        all_documents: the documents (shuffled in place).
        vocab: the ``PretrainingVocab``.
        max_seq_length: S.
        dupe_factor: the number of passes over the documents.
        short_seq_prob: the probability of a shorter target length.
        masked_lm_prob: the share of tokens masked.
        max_predictions_per_seq: P.
        rng: the ``random.Random`` (or ``WordStream``) of every draw.
        do_whole_word_mask: mask whole words.

    Returns:
        The instances, shuffled.
    """
    rng.shuffle(all_documents)
    instances: List[TrainingInstance] = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(create_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab, rng, do_whole_word_mask))
    rng.shuffle(instances)
    return instances


def create_instances_from_document(all_documents: List[List[List[int]]], document_index: int,
                                   max_seq_length: int, short_seq_prob: float,
                                   masked_lm_prob: float, max_predictions_per_seq: int,
                                   vocab: PretrainingVocab, rng,
                                   do_whole_word_mask: bool = False) -> List[TrainingInstance]:
    """The instances of one pass over ``all_documents[document_index]``.

    Args:
        all_documents: the documents (random next sentences come from others).
        document_index: the index of the document.
        max_seq_length: S.
        short_seq_prob: the probability of a shorter target length.
        masked_lm_prob: the share of tokens masked.
        max_predictions_per_seq: P.
        vocab: the ``PretrainingVocab``.
        rng: the ``random.Random`` (or ``WordStream``) of every draw.
        do_whole_word_mask: mask whole words.

    Returns:
        The document's instances, in order.
    """
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3  # [CLS] A [SEP] B [SEP]
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances = []
    current_chunk: List[List[int]] = []
    current_length = 0
    i = 0
    while i < len(document):
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            a_end = 1
            if len(current_chunk) >= 2:
                a_end = rng.randint(1, len(current_chunk) - 1)
            tokens_a = [t for sentence in current_chunk[:a_end] for t in sentence]
            tokens_b: List[int] = []
            if len(current_chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                target_b_length = target_seq_length - len(tokens_a)
                for _ in range(MAX_RANDOM_DOCUMENT_TRIES):
                    random_document_index = rng.randint(0, len(all_documents) - 1)
                    if random_document_index != document_index:
                        break
                random_document = all_documents[random_document_index]
                random_start = rng.randint(0, len(random_document) - 1)
                for j in range(random_start, len(random_document)):
                    tokens_b.extend(random_document[j])
                    if len(tokens_b) >= target_b_length:
                        break
                i -= len(current_chunk) - a_end  # put the unused sentences back
            else:
                is_random_next = False
                tokens_b = [t for sentence in current_chunk[a_end:] for t in sentence]
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            tokens = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            tokens, positions, labels = create_masked_lm_predictions(
                tokens, masked_lm_prob, max_predictions_per_seq, vocab, rng, do_whole_word_mask)
            instances.append(TrainingInstance(tokens, segment_ids, positions, labels,
                                              is_random_next))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def create_masked_lm_predictions(tokens: List[int], masked_lm_prob: float,
                                 max_predictions_per_seq: int, vocab: PretrainingVocab, rng,
                                 do_whole_word_mask: bool = False
                                 ) -> Tuple[List[int], List[int], List[int]]:
    """``(output_tokens, masked_lm_positions, masked_lm_labels)`` for ``[CLS] A [SEP] B [SEP]``.

    Positions come out ascending; labels are the ids at those positions before masking.

    Args:
        tokens: the instance's token ids.
        masked_lm_prob: the share of tokens masked.
        max_predictions_per_seq: P.
        vocab: the ``PretrainingVocab``.
        rng: the ``random.Random`` (or ``WordStream``) of every draw.
        do_whole_word_mask: mask whole words.

    Returns:
        ``(output_tokens, masked_lm_positions, masked_lm_labels)``.
    """
    cand_indexes: List[List[int]] = []
    for i, token in enumerate(tokens):
        if token == vocab.cls_id or token == vocab.sep_id:
            continue
        if do_whole_word_mask and cand_indexes and vocab.is_subword[token]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)

    output_tokens = list(tokens)
    limit = num_to_predict(len(tokens), masked_lm_prob, max_predictions_per_seq)
    masked: List[Tuple[int, int]] = []  # (position, original id)
    covered = set()
    num_words = vocab.num_words
    for index_set in cand_indexes:
        if len(masked) >= limit:
            break
        if len(masked) + len(index_set) > limit:
            continue  # a whole word that does not fit is skipped, not cut
        if any(index in covered for index in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:
                replacement = vocab.mask_id
            elif rng.random() < 0.5:
                replacement = tokens[index]
            else:
                replacement = int(vocab.word_ids[rng.randint(0, num_words - 1)])
            output_tokens[index] = replacement
            masked.append((index, tokens[index]))
    masked.sort()
    return output_tokens, [p for p, _ in masked], [label for _, label in masked]


def truncate_seq_pair(tokens_a: List, tokens_b: List, max_num_tokens: int, rng) -> None:
    """Trims the longer list (``tokens_b`` on a tie), front or back at random, in place, until
    the two fit in ``max_num_tokens``.

    Args:
        tokens_a: the first segment (trimmed in place).
        tokens_b: the second segment (trimmed in place).
        max_num_tokens: the most tokens of the two together.
        rng: the ``random.Random`` (or ``WordStream``) of the draws.
    """
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def instance_features(instance: TrainingInstance, max_seq_length: int,
                      max_predictions_per_seq: int) -> Dict[str, List]:
    """The 7 record features of one instance, zero-padded as the original writes them.

    Args:
        instance: the instance.
        max_seq_length: S.
        max_predictions_per_seq: P.

    Returns:
        Feature name -> list of values ([S], [P] or [1]).

    Raises:
        PretrainingDataError: the instance is longer than S.
    """
    n = len(instance.tokens)
    if n > max_seq_length:
        raise PretrainingDataError("instance of %d tokens is longer than --max_seq_length=%d"
                                   % (n, max_seq_length))
    pad = max_seq_length - n
    k = len(instance.masked_lm_positions)
    pad_p = max_predictions_per_seq - k
    return {
        "input_ids": list(instance.tokens) + [0] * pad,
        "input_mask": [1] * n + [0] * pad,
        "segment_ids": list(instance.segment_ids) + [0] * pad,
        "masked_lm_positions": list(instance.masked_lm_positions) + [0] * pad_p,
        "masked_lm_ids": list(instance.masked_lm_labels) + [0] * pad_p,
        "masked_lm_weights": [1.0] * k + [0.0] * pad_p,
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }


def write_instance_to_example_files(instances: Sequence[TrainingInstance], max_seq_length: int,
                                    max_predictions_per_seq: int,
                                    output_files: Sequence[str]) -> int:
    """Writes one ``tf.train.Example`` per instance, round-robin over ``output_files``
    (atomically: the files appear complete or not at all). Returns the number written.

    Args:
        instances: the instances, in order.
        max_seq_length: S.
        max_predictions_per_seq: P.
        output_files: the TFRecord files.

    Returns:
        The number of records written.
    """
    from data.pretraining import records as pretraining_records

    return pretraining_records.write_feature_dicts(
        (instance_features(inst, max_seq_length, max_predictions_per_seq) for inst in instances),
        max_seq_length, max_predictions_per_seq, output_files)
