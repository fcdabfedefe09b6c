"""The ``Example::`` blocks of the main entry points' docstrings run as written.

Each entry point's docstring (``inspect.getdoc``) holds one ``Example::`` block: the indented
lines after it. The block runs, statement by statement, in a scratch folder laid out with the
names the examples use (no text is substituted):

* ``uncased_L-12_H-768_A-12/``: the tiny golden model (``bert_config.json``,
  ``bert_model.ckpt.*``, ``checkpoint``) and the golden ``vocab.txt``, standing in for a Google
  release folder (same file names, same vocab; hidden size 64, 2 layers);
* ``glue/MRPC/``: the first rows of MRPC's ``train.tsv``, ``dev.tsv``, ``test.tsv``.

The examples state what a line gives in a trailing comment, which is checked here:

* ``# [B, S, H]``: the value's shape. A number is the size itself; a letter is any size, the
  same wherever it appears in the example (``[B, S]`` then ``[B, S, 32]``: the same B and S);
* ``# {logits: [B, 3], probabilities: [B, 3]}``: a mapping with these keys (a key may go
  without a shape: then only its presence is checked);
* ``# == <expression>``: the value equals the expression (evaluated in the example's names).

The comment is checked on an expression statement (its value) or an assignment to one name
(that name's value). An example's last statement must carry one: it is what the example shows.
"""

import ast
import inspect
import os
import re
import textwrap

import numpy as np
import pytest

from tests import paths

TINY = os.path.join(paths.GOLDEN, "modeling", "tiny")
RELEASE = "uncased_L-12_H-768_A-12"  # the folder name the examples use for a Google release
GLUE_ROWS = 33  # header + 32 examples per split: one training batch of the default 32

# (module, attribute or None for the module's own docstring): the entry points whose docstring
# example runs here.
ENTRY_POINTS = [
    ("modeling.encoder", "BertModel"),
    ("modeling.heads.classifier", "BertClassifier"),
    ("modeling.heads.classifier", "build_classifier_model"),
    ("modeling.heads.squad", "BertSpanLabeler"),
    ("modeling.heads.multiple_choice", "BertMultipleChoice"),
    ("modeling.heads.token_classifier", "BertTokenClassifier"),
    ("modeling.checkpoints.load", "load_checkpoint"),
    ("modeling.training.optimizers", "create_optimizer"),
    ("bert_tasks.pretrained", None),
    ("bert_tasks.pretrained", "from_pretrained"),
    ("bert_tasks.driver", None),
]

_EXPECT_RE = re.compile(r"#\s*(\[[\w\s,]*\]|\{.*\}|==.*?)\s*$")


def example_source(doc: str) -> str:
    """The indented block after the docstring's ``Example::`` line, dedented."""
    lines = doc.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().endswith("Example::")]
    assert len(starts) == 1, "expected one 'Example::' block, found %d" % len(starts)
    header = lines[starts[0]]
    indent = len(header) - len(header.lstrip())
    block = []
    for line in lines[starts[0] + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    source = textwrap.dedent("\n".join(block)).strip("\n") + "\n"
    assert source.strip(), "the 'Example::' block is empty"
    return source


def _dims(text: str):
    return [d.strip() for d in text.strip()[1:-1].split(",") if d.strip()]


def _check_shape(value, dims, sizes, where):
    shape = tuple(int(d) for d in np.shape(value))
    assert len(shape) == len(dims), "%s: shape %s, the example says [%s]" % (
        where, shape, ", ".join(dims))
    for size, dim in zip(shape, dims):
        if dim.isdigit():
            assert size == int(dim), "%s: shape %s, the example says [%s]" % (
                where, shape, ", ".join(dims))
        else:
            assert sizes.setdefault(dim, size) == size, (
                "%s: %s = %d here, %d earlier in the example" % (where, dim, size, sizes[dim]))


def _check_mapping(value, text, sizes, where):
    entries = re.findall(r"(\w+)\s*(?::\s*(\[[\w\s,]*\]))?", text.strip()[1:-1])
    assert entries, "%s: cannot read %r" % (where, text)
    assert hasattr(value, "keys"), "%s: a %s, the example says a mapping" % (
        where, type(value).__name__)
    for key, dims in entries:
        assert key in value, "%s: no key %r (has %s)" % (where, key, sorted(value))
        if dims:
            _check_shape(value[key], _dims(dims), sizes, "%s[%r]" % (where, key))


def check_expectation(value, expected: str, namespace, sizes, where):
    if expected.startswith("["):
        _check_shape(value, _dims(expected), sizes, where)
    elif expected.startswith("{"):
        _check_mapping(value, expected, sizes, where)
    else:
        wanted = eval(expected[2:], namespace)  # noqa: S307 - the example's own text
        assert value == wanted, "%s: %r, the example says %r" % (where, value, wanted)


def run_example(source: str, name: str) -> int:
    """Runs ``source`` statement by statement, checking each commented result; returns how
    many were checked."""
    tree = ast.parse(source)
    lines = source.splitlines()
    namespace = {"__name__": "docstring_example"}
    sizes = {}
    checked = 0
    for index, node in enumerate(tree.body):
        where = "%s example, line %d" % (name, node.end_lineno)
        match = _EXPECT_RE.search(lines[node.end_lineno - 1])
        last = index == len(tree.body) - 1
        assert match or not last, "%s: the last line must say its result (# [..], # {..}, " \
                                  "# == ..)" % where
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), name, "eval"),  # noqa: S307
                         namespace)
        else:
            exec(compile(ast.Module([node], type_ignores=[]), name, "exec"),  # noqa: S102
                 namespace)
            if match:
                assert isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name), \
                    "%s: a result comment goes on an expression or 'name = ...'" % where
                value = namespace[node.targets[0].id]
        if match:
            check_expectation(value, match.group(1), namespace, sizes, where)
            checked += 1
    return checked


def _copy_head(source: str, target: str, rows: int) -> None:
    with open(source, encoding="utf-8") as f:
        head = [line for _, line in zip(range(rows), f)]
    with open(target, "w", encoding="utf-8") as f:
        f.writelines(head)


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory):
    """The scratch folder the examples' relative paths name (see the module docstring)."""
    root = tmp_path_factory.mktemp("examples")
    release = root / RELEASE
    release.mkdir()
    for name in os.listdir(TINY):
        if name.startswith(("bert_config.json", "bert_model.ckpt", "checkpoint")):
            os.symlink(os.path.join(TINY, name), release / name)
    os.symlink(paths.GOLDEN_VOCAB, release / "vocab.txt")
    mrpc = root / "glue" / "MRPC"
    mrpc.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        _copy_head(os.path.join(paths.DATA, "glue", "MRPC", split + ".tsv"),
                   str(mrpc / (split + ".tsv")), GLUE_ROWS)
    return root


@pytest.mark.parametrize("module_name, attribute", ENTRY_POINTS,
                         ids=["%s.%s" % (m, a or "__doc__") for m, a in ENTRY_POINTS])
def test_docstring_example_runs(module_name, attribute, example_folder, monkeypatch, tmp_path):
    import importlib

    import keras

    module = importlib.import_module(module_name)
    target = module if attribute is None else getattr(module, attribute)
    source = example_source(inspect.getdoc(target))
    # Each example in its own copy of the layout: an output folder ("out") starts empty.
    for entry in os.listdir(example_folder):
        os.symlink(example_folder / entry, tmp_path / entry)
    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    assert run_example(source, "%s.%s" % (module_name, attribute or "__doc__")) >= 1


def test_the_checker_catches_a_wrong_shape():
    source = "import numpy as np\nx = np.zeros((2, 3))  # [B, S]\nx.T  # [B, S]\n"
    with pytest.raises(AssertionError, match="B = 3 here, 2 earlier"):
        run_example(source, "wrong size")
    with pytest.raises(AssertionError, match="the example says"):
        run_example("import numpy as np\nnp.zeros((2, 3))  # [B, 3, H]\n", "wrong rank")
    with pytest.raises(AssertionError, match="last line"):
        run_example("x = 1\ny = 2\n", "no result")
    with pytest.raises(AssertionError, match="no key 'b'"):
        run_example("d = {'a': [[1, 2]]}\nd  # {a: [1, N], b}\n", "missing key")
    assert run_example("d = {'a': [[1, 2]], 'b': 0}\nd  # {a: [1, N], b}\n", "keys") == 1
    assert run_example("n = 2 + 1  # == 3\n", "equal") == 1
