"""Generates the demo's text: a pre-training corpus and a labelled review set.

Everything here is written for this project; the text is produced from small
templates with a seeded ``random.Random``, so the same seed gives the same
files on every machine. The corpus is in BERT's input format (one sentence per
line, a blank line between documents); the labelled set is a TSV with a header
``text_a<TAB>label`` (labels ``positive`` / ``negative``), the layout of
``run_classifier.py --task_name=tsv``.
"""

from __future__ import annotations

import os
import random
from typing import List, Tuple

from bert_common.atomic import atomic_open

_HANDWRITTEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt")

_TOWNS = ["Alder Bay", "Brookfield", "Cedar Hollow", "Dunmore", "Elmstead", "Fairhaven",
          "Glenrock", "Hartwell", "Ivybridge", "Juniper Falls", "Kingsmere", "Larchmont"]
_PEOPLE = ["the keeper", "the baker", "the ferryman", "the teacher", "the miller", "the doctor",
           "the gardener", "the postman", "the carpenter", "the painter", "the fisherman",
           "the librarian"]
_NAMES = ["Anna", "Bruno", "Clara", "Dmitri", "Elena", "Felix", "Greta", "Hugo", "Ines",
          "Jonas", "Kira", "Leon", "Mara", "Nils", "Olga", "Pavel"]
_PLACES = ["the harbour", "the market square", "the old mill", "the stone bridge", "the railway station",
           "the village school", "the lighthouse", "the orchard", "the town hall", "the river bank",
           "the bakery", "the library"]
_THINGS = ["a basket of apples", "a wooden chair", "a brass lantern", "a loaf of rye bread",
           "a bundle of letters", "a map of the coast", "a jar of honey", "a pair of boots",
           "a box of nails", "a fishing net", "a violin", "a clock"]
_TIMES = ["at dawn", "every morning", "in the evening", "after lunch", "on Sundays", "before the storm",
          "in early spring", "late at night", "at the end of summer", "during the festival"]
_WEATHER = ["the wind was cold and strong", "a light rain fell all day", "the sky was clear and blue",
            "fog covered the valley", "snow lay on the hills", "the sun warmed the stones"]
_VERBS = ["carried", "repaired", "painted", "sold", "found", "borrowed", "cleaned", "wrapped"]
_FEELINGS = ["happy", "tired", "curious", "worried", "proud", "calm"]

_TEMPLATES = [
    "{person} walked to {place} {time}.",
    "{name} {verb} {thing} near {place}.",
    "In {town}, {weather}.",
    "{name} said that {weather} {time}.",
    "{person} {verb} {thing} and gave it to {name}.",
    "People in {town} meet at {place} {time}.",
    "{name} felt {feeling} when {person} arrived at {place}.",
    "The road from {town} to {town2} passes {place}.",
    "{time_cap}, {person} opens the doors of {place}.",
    "{name} and {name2} {verb} {thing} together.",
    "Nobody in {town} remembers who first {verb} {thing}.",
    "Because {weather}, {name} stayed at {place}.",
]

_PRODUCTS = ["the bread", "the soup", "the coffee", "the room", "the concert", "the book",
             "the train ride", "the museum", "the cake", "the service", "the film", "the garden tour"]
_POSITIVE = ["wonderful", "excellent", "delightful", "superb", "lovely", "great", "fantastic",
             "charming", "pleasant", "brilliant"]
_NEGATIVE = ["terrible", "awful", "disappointing", "dreadful", "poor", "boring", "horrible",
             "unpleasant", "dull", "bad"]
_POS_CLAUSES = ["I would happily come back", "we enjoyed every minute", "it was worth the price",
                "the staff were kind", "everything felt fresh"]
_NEG_CLAUSES = ["I will not come back", "we left early", "it was a waste of money",
                "the staff were rude", "everything felt stale"]
_REVIEW_TEMPLATES = [
    "{thing} was {adj}.",
    "{thing} was {adj} and {clause}.",
    "In {town}, {thing} was {adj}.",
    "Honestly, {thing} was {adj}; {clause}.",
    "{clause}, because {thing} was {adj}.",
]


def _sentence(rng: random.Random) -> str:
    template = rng.choice(_TEMPLATES)
    town, town2 = rng.sample(_TOWNS, 2)
    name, name2 = rng.sample(_NAMES, 2)
    time = rng.choice(_TIMES)
    text = template.format(
        person=rng.choice(_PEOPLE), place=rng.choice(_PLACES), time=time,
        time_cap=time[0].upper() + time[1:], name=name, name2=name2, verb=rng.choice(_VERBS),
        thing=rng.choice(_THINGS), town=town, town2=town2, weather=rng.choice(_WEATHER),
        feeling=rng.choice(_FEELINGS))
    return text[0].upper() + text[1:]


def generate_corpus(num_documents: int = 120, seed: int = 1) -> List[List[str]]:
    """Returns documents, each a list of 6 to 14 sentences."""
    rng = random.Random(seed)
    return [[_sentence(rng) for _ in range(rng.randint(6, 14))] for _ in range(num_documents)]


def generate_reviews(num_examples: int, seed: int) -> List[Tuple[str, str]]:
    """Returns (sentence, label) pairs, balanced between positive and negative."""
    rng = random.Random(seed)
    out = []
    for i in range(num_examples):
        positive = i % 2 == 0
        text = rng.choice(_REVIEW_TEMPLATES).format(
            thing=rng.choice(_PRODUCTS), town=rng.choice(_TOWNS),
            adj=rng.choice(_POSITIVE if positive else _NEGATIVE),
            clause=rng.choice(_POS_CLAUSES if positive else _NEG_CLAUSES))
        out.append((text[0].upper() + text[1:], "positive" if positive else "negative"))
    rng.shuffle(out)
    return out


def write_corpus(path: str, documents: List[List[str]]) -> None:
    with atomic_open(path) as f:
        f.write("\n\n".join("\n".join(doc) for doc in documents) + "\n")


def write_reviews(path: str, examples: List[Tuple[str, str]]) -> None:
    with atomic_open(path) as f:
        f.write("text_a\tlabel\n")
        for text, label in examples:
            f.write("%s\t%s\n" % (text, label))


def write_all(output_dir: str, seed: int = 1) -> dict:
    """Writes corpus.txt and reviews/{train,dev,test}.tsv under ``output_dir``; returns the paths."""
    os.makedirs(os.path.join(output_dir, "reviews"), exist_ok=True)
    paths = {
        "corpus": os.path.join(output_dir, "corpus.txt"),
        "train": os.path.join(output_dir, "reviews", "train.tsv"),
        "dev": os.path.join(output_dir, "reviews", "dev.tsv"),
        "test": os.path.join(output_dir, "reviews", "test.tsv"),
    }
    with open(_HANDWRITTEN, encoding="utf-8") as f:
        handwritten = [doc.split("\n") for doc in f.read().strip().split("\n\n")]
    write_corpus(paths["corpus"], handwritten + generate_corpus(seed=seed))
    write_reviews(paths["train"], generate_reviews(400, seed + 1))
    write_reviews(paths["dev"], generate_reviews(100, seed + 2))
    write_reviews(paths["test"], generate_reviews(40, seed + 3))
    return paths
