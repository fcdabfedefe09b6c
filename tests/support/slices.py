"""Small slices of the real data in ``../shared`` for tests (written to a test's own folder;
the shared files are never changed)."""

from __future__ import annotations

import json
import os
from typing import Dict


def head_lines(src: str, dst: str, count: int) -> str:
    """The first ``count`` lines of ``src`` (a header counts as one) written to ``dst``."""
    with open(src, encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return str(dst)


def glue_slice(src_dir: str, dst_dir, lines: Dict[str, int]) -> str:
    """A GLUE data folder holding ``split.tsv`` with its header and the first ``n`` rows for
    each ``split: n`` of ``lines``; returns the folder."""
    os.makedirs(dst_dir, exist_ok=True)
    for split, n in lines.items():
        head_lines(os.path.join(src_dir, split + ".tsv"),
                   os.path.join(dst_dir, split + ".tsv"), n + 1)
    return str(dst_dir)


def conll_sentences(src: str, dst, count: int) -> str:
    """The first ``count`` sentences of a CoNLL file (with its -DOCSTART- lines)."""
    out, seen = [], 0
    with open(src, encoding="utf-8") as f:
        for line in f:
            out.append(line)
            if not line.strip():
                seen += 1
                if seen >= count:
                    break
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(out)
    return str(dst)


def squad_slice(src: str, dst, num_questions: int) -> str:
    """The first ``num_questions`` questions of a SQuAD file (whole layout kept)."""
    with open(src, encoding="utf-8") as f:
        root = json.load(f)
    left = num_questions
    for article in root["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = paragraph["qas"][:max(left, 0)]
            left -= len(paragraph["qas"])
        article["paragraphs"] = [p for p in article["paragraphs"] if p["qas"]]
    root["data"] = [a for a in root["data"] if a["paragraphs"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(root, f)
    return str(dst)
