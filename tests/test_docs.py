"""The documentation runs and its links resolve.

(a) README.md's quickstarts 2 (MRPC from a Google checkpoint) and 3 (your own data, served):
every ``bash`` block of each runs as written, in order, from the checkout, with ``python`` the
test's own interpreter. The one substitution is the value of each variable a block exports
(``export NAME=...``), listed in ``VARIABLES``: the checkpoint folder becomes the tiny golden model
(``../shared/golden/modeling/tiny`` with ``paths.GOLDEN_VOCAB`` as its ``vocab.txt``), the data
folders a few examples of ``../shared/data/glue`` written into a temporary folder, the output
folders temporary ones. Flags are not changed (the tiny model takes the quickstarts'
``--max_seq_length=128``). A block that exports a variable the test does not know fails the
test, so a new variable is noticed. The checks are the outputs the quickstarts name. The demo
(quickstart 1) is tests/demo's.

(b) Every relative link of README.md, CHANGELOG.md and docs/*.md resolves: the file or folder
exists and a ``#anchor`` is a heading of the target, by GitHub's slug rule. ``PENDING`` lists
pages that are linked before they are written.
"""

import csv
import glob
import os
import re
import subprocess
import sys

import pytest

from tests import paths

README = os.path.join(paths.ROOT, "README.md")
TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
GLUE = os.path.join(paths.DATA, "glue")
EXAMPLES = 40  # lines of each data file (a header included) given to the quickstarts
BLOCK_TIMEOUT_S = 300
# Linked from README.md and docs/classification.md; the maintainer writes it.
PENDING = {"docs/your-own-task.md"}


# ------------------------------------------------------------------------------ markdown


FENCE = re.compile(r"^```(\w*)\s*$")


def _lines_outside_code(text):
    """(line, in a fenced block?) of every line."""
    inside = False
    for line in text.splitlines():
        if FENCE.match(line.strip()) or line.strip() == "```":
            inside = not inside
            yield line, True
            continue
        yield line, inside


def section(text, number):
    """The text of README's ``### <number>. ...`` section, up to the next heading of level <= 3."""
    lines, found = [], False
    for line, in_code in _lines_outside_code(text):
        heading = not in_code and re.match(r"^(#{1,3}) ", line)
        if found and heading:
            break
        if not found and not in_code and line.startswith("### %d. " % number):
            found = True
        if found:
            lines.append(line)
    assert found, "README.md: no section '### %d. ...'" % number
    return "\n".join(lines) + "\n"


def code_blocks(text, language):
    return re.findall(r"^```%s\n(.*?)^```" % language, text, flags=re.S | re.M)


EXPORT = re.compile(r"^export ([A-Z_][A-Z0-9_]*)=\S*(\s+#.*)?$")


def substituted(block, values):
    """The block with the value of every ``export NAME=...`` line replaced by values[NAME]."""
    out = []
    for line in block.splitlines():
        m = EXPORT.match(line)
        if m:
            name = m.group(1)
            assert name in values, "README exports %s, which tests/test_docs.py does not set" % name
            line = "export %s=%s" % (name, values[name])
        out.append(line)
    return "\n".join(out) + "\n"


def run_quickstart(number, values):
    """Runs every bash block of quickstart ``number``; returns the stdout of each."""
    blocks = code_blocks(section(open(README, encoding="utf-8").read(), number), "bash")
    assert blocks, "README.md quickstart %d: no bash block" % number
    env = dict(os.environ, **values)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    outputs = []
    for i, block in enumerate(blocks):
        script = "set -euo pipefail\n" + substituted(block, values)
        done = subprocess.run(["bash", "-c", script], cwd=paths.ROOT, env=env, text=True,
                              capture_output=True, timeout=BLOCK_TIMEOUT_S)
        assert done.returncode == 0, "quickstart %d, block %d exited %d:\n%s\n%s" % (
            number, i + 1, done.returncode, block, done.stderr[-3000:])
        outputs.append(done.stdout)
    return outputs


def tiny_model_dir(folder):
    """A Google-style model folder of the tiny golden model: bert_config.json, vocab.txt,
    bert_model.ckpt.*"""
    os.makedirs(folder)
    os.symlink(paths.GOLDEN_VOCAB, os.path.join(folder, "vocab.txt"))
    for path in glob.glob(os.path.join(TINY, "bert_config.json")) + \
            glob.glob(os.path.join(TINY, "bert_model.ckpt.*")):
        os.symlink(path, os.path.join(folder, os.path.basename(path)))
    return folder


def head(path, n):
    with open(path, encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


def read_eval_results(path):
    with open(path, encoding="utf-8") as f:
        return dict(line.strip().split(" = ") for line in f if line.strip())


# ---------------------------------------------------------------------------- quickstarts


def test_quickstart_2_fine_tunes_mrpc(tmp_path):
    glue_dir = tmp_path / "glue"
    (glue_dir / "MRPC").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        lines = head(os.path.join(GLUE, "MRPC", split + ".tsv"), EXAMPLES)
        (glue_dir / "MRPC" / (split + ".tsv")).write_text("".join(lines), encoding="utf-8")
    out_dir = tmp_path / "runs" / "mrpc"
    values = {"BERT_BASE_DIR": tiny_model_dir(str(tmp_path / "bert")),
              "GLUE_DIR": str(glue_dir), "OUTPUT_DIR": str(out_dir)}

    outputs = run_quickstart(2, values)

    results = read_eval_results(out_dir / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_f1", "eval_acc_and_f1", "eval_loss",
                            "global_step", "loss"}
    assert "eval_accuracy" in outputs[-1]  # the block ends with `cat eval_results.txt`
    rows = (out_dir / "test_results.tsv").read_text().splitlines()
    assert len(rows) == EXAMPLES - 1 and all(len(r.split("\t")) == 2 for r in rows)
    assert (out_dir / "MRPC.tsv").read_text().startswith("index\tprediction\n")
    step = int(results["global_step"])
    assert step > 0 and (out_dir / ("model.ckpt-%d.index" % step)).is_file()
    assert (out_dir / "train").is_dir()


def write_csv_task(folder):
    """train/dev/test.csv with the quickstart's header names, from SST-2's dev sentences (commas
    inside the text, so the CSV quotes)."""
    with open(os.path.join(GLUE, "SST-2", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:1 + 3 * EXAMPLES]
    names = {"0": "negative", "1": "positive"}
    splits = {"train": rows[:EXAMPLES], "dev": rows[EXAMPLES:2 * EXAMPLES],
              "test": rows[2 * EXAMPLES:]}
    os.makedirs(folder)
    for split, part in splits.items():
        with open(os.path.join(folder, split + ".csv"), "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            if split == "test":  # labels optional, an index column names the rows
                writer.writerow(["index", "text_a"])
                writer.writerows([1000 + i, text] for i, (text, _) in enumerate(part))
            else:
                writer.writerow(["text_a", "label"])
                writer.writerows([text, names[label]] for text, label in part)
    assert any("," in text for text, _ in rows)
    return folder


def test_quickstart_3_fine_tunes_your_csv_and_serves_it(tmp_path):
    data_dir = write_csv_task(str(tmp_path / "my_task"))
    out_dir = tmp_path / "runs" / "my_task"
    export_dir = tmp_path / "models" / "my_task"
    values = {"BERT_BASE_DIR": tiny_model_dir(str(tmp_path / "bert")), "DATA_DIR": data_dir,
              "OUTPUT_DIR": str(out_dir), "EXPORT_DIR": str(export_dir)}

    outputs = run_quickstart(3, values)

    for split in ("train", "dev", "test"):  # the CSV block wrote the TSV files
        header = head(os.path.join(data_dir, split + ".tsv"), 1)[0]
        assert header == ("index\ttext_a\n" if split == "test" else "text_a\tlabel\n")
    results = read_eval_results(out_dir / "eval_results.txt")
    assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
    rows = (out_dir / "test_results.tsv").read_text().splitlines()
    assert len(rows) == EXAMPLES and all(len(r.split("\t")) == 2 for r in rows)
    predictions = (out_dir / "predictions.tsv").read_text().splitlines()
    assert predictions[0] == "index\tprediction" and len(predictions) == EXAMPLES + 1
    assert predictions[1].split("\t")[0] == "1000"
    assert {p.split("\t")[1] for p in predictions[1:]} <= {"negative", "positive"}
    assert os.listdir(export_dir) == ["1"]
    assert (export_dir / "1" / "saved_model.pb").is_file()
    answer = outputs[-1]  # the request block prints the label and the probabilities
    assert re.search(r"b'(negative|positive)'", answer), answer


# ---------------------------------------------------------------------------------- links


def markdown_files():
    files = [os.path.join(paths.ROOT, "README.md"), os.path.join(paths.ROOT, "CHANGELOG.md")]
    return files + sorted(glob.glob(os.path.join(paths.ROOT, "docs", "*.md")))


def github_slug(heading):
    """GitHub's anchor of a heading: link text kept, lower case, punctuation dropped (letters,
    digits, '_', '-' and spaces stay), spaces become '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a markdown file, duplicates numbered as GitHub does (-1, -2)."""
    seen, found = {}, set()
    with open(path, encoding="utf-8") as f:
        for line, in_code in _lines_outside_code(f.read()):
            m = not in_code and re.match(r"^#{1,6} (.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(1))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                found.add(slug if n == 0 else "%s-%d" % (slug, n))
    return found


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path):
    """(line number, target) of every markdown link outside code (fenced or inline)."""
    with open(path, encoding="utf-8") as f:
        for number, (line, in_code) in enumerate(_lines_outside_code(f.read()), 1):
            if not in_code:
                for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                    yield number, target


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, paths.ROOT))
def test_relative_links_resolve(path):
    bad = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part \
            else path
        rel = os.path.relpath(dest, paths.ROOT)
        where = "%s:%d: %s" % (os.path.relpath(path, paths.ROOT), number, target)
        if not os.path.exists(dest):
            if rel not in PENDING:
                bad.append(where + " (no such file)")
            continue
        if anchor and os.path.isfile(dest) and anchor not in anchors(dest):
            bad.append(where + " (no such heading in %s)" % rel)
    assert not bad, "\n".join(bad)


def test_the_docs_index_lists_every_page():
    index = open(os.path.join(paths.ROOT, "docs", "README.md"), encoding="utf-8").read()
    listed = {t for _, t in links(os.path.join(paths.ROOT, "docs", "README.md"))}
    pages = {os.path.basename(p) for p in glob.glob(os.path.join(paths.ROOT, "docs", "*.md"))}
    missing = sorted(pages - listed - {"README.md"})
    assert not missing, "docs/README.md does not link %s" % missing
    assert index.startswith("# ")
