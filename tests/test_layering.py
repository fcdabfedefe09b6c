"""The package layering, checked on the source (ast), so that a new import cannot quietly
undo it:

    bert_common  <-  data, modeling  <-  bert_tasks  <-  bert_cli  <-  root scripts

``modeling`` and ``data`` never import each other; nothing under the CLI imports ``bert_cli``;
``bench/`` uses the library (one exception: the create_pretraining_data benchmark times the
command itself, as the original's script is timed)."""

import ast
import os

import pytest

from tests import paths

FORBIDDEN = {
    "bert_common": {"data", "modeling", "bert_tasks", "bert_cli", "tensorflow", "keras"},
    "data": {"modeling", "bert_tasks", "bert_cli"},
    "modeling": {"data", "bert_tasks", "bert_cli"},
    "bert_tasks": {"bert_cli"},
    "bench": {"bert_cli", "tests", "run_classifier", "run_squad", "run_swag", "run_ner", "run_pretraining",
              "extract_features", "create_pretraining_data", "convert_checkpoint"},
}
# bert_common may use TensorFlow inside a function (TFRecord helpers), never at import time.
LAZY_ALLOWED = {"bert_common": {"tensorflow", "keras"}}
BENCH_TIMES_THE_COMMAND = {"bench/bench_create_pretraining_data.py"}


def _python_files(package):
    root = os.path.join(paths.ROOT, package)
    for folder, dirs, names in os.walk(root):
        # Not the project's code: virtual environments (bench/.venvs) and other hidden folders.
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def _imports(path):
    """(top-level package, at module level?) of every import in the file, strings of code run
    by the file (bench child processes) included."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []

    def visit(node, top_level):
        for child in ast.iter_child_nodes(node):
            inner = top_level and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], top_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], top_level))
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                for line in child.value.splitlines():
                    words = line.strip().split()
                    if len(words) > 1 and words[0] in ("import", "from"):
                        found.append((words[1].split(".")[0].rstrip(","), False))
            visit(child, inner)

    visit(tree, True)
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_against_the_layering(package):
    bad = []
    for path in _python_files(package):
        rel = os.path.relpath(path, paths.ROOT)
        for name, top_level in _imports(path):
            if name not in FORBIDDEN[package]:
                continue
            if not top_level and name in LAZY_ALLOWED.get(package, ()):
                continue
            if rel in BENCH_TIMES_THE_COMMAND and name == "bert_cli":
                continue
            bad.append("%s imports %s" % (rel, name))
    assert not bad, "\n".join(bad)


def test_the_checker_sees_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import data.glue\nfrom modeling import x\n\n\ndef f():\n"
                      "    import tensorflow as tf\n\nCODE = '''\nfrom bert_cli import y\n'''\n")
    assert sorted(_imports(str(source))) == [("bert_cli", False), ("data", True),
                                             ("modeling", True), ("tensorflow", False)]
