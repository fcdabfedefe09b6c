"""The package layering, checked on the source (ast), so that a new import cannot quietly
undo it:

    bert_common  <-  data, modeling  <-  bert_tasks  <-  bert_cli  <-  root scripts

``modeling`` and ``data`` never import each other; nothing under the CLI imports ``bert_cli``;
``bench/`` uses the library (one exception: the create_pretraining_data benchmark times the
command itself, as the original's script is timed). Exports (serving and TF Hub SavedModels,
TF Serving's versioned layout, Hugging Face folders) live in one place, ``bert_tasks/exports``,
above ``data`` and ``modeling``: nothing in ``bert_common``, ``data`` or ``modeling`` writes one."""

import ast
import functools
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
BENCH_TIMES_THE_COMMAND = {"bench/speed/create_pretraining_data.py"}
# Where no export code may be (it belongs in bert_tasks/exports); see _export_code.
EXPORT_FREE = ("bert_common", "data", "modeling")
EXPORT_WRITERS = {"save_saved_model", "save_saved_models", "save_saved_model_version"}


def _python_files(package):
    root = os.path.join(paths.ROOT, package)
    for folder, dirs, names in os.walk(root):
        # Not the project's code: virtual environments (bench/.venvs) and other hidden folders.
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


@functools.lru_cache(maxsize=None)
def _tree(path):
    """The file's syntax tree, parsed once per session: both checks (and every package
    parameter) walk the same trees, which nothing modifies."""
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _imports(path):
    """(top-level package, at module level?) of every import in the file, strings of code run
    by the file (bench child processes) included."""
    tree = _tree(path)
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


def _export_code(path):
    """What in the file writes an export: a ``tf.saved_model.save`` call, an import of
    safetensors' writers, an ``export_*`` function or class, a SavedModel writer. (Keras's own
    ``Model.export``, which the model classes override, is the models' API, not export code.)"""
    tree = _tree(path)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "save" and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "saved_model"):
            found.append("saved_model.save (line %d)" % node.lineno)
        elif (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("safetensors")
              and any(a.name.startswith("save") for a in node.names)):
            found.append("safetensors' writer (line %d)" % node.lineno)
        elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and (node.name.startswith("export_") or node.name in EXPORT_WRITERS)):
            found.append("%s (line %d)" % (node.name, node.lineno))
    return found


@pytest.mark.parametrize("package", EXPORT_FREE)
def test_exports_live_in_bert_tasks_exports(package):
    bad = []
    for path in _python_files(package):
        rel = os.path.relpath(path, paths.ROOT)
        bad.extend("%s: %s" % (rel, what) for what in _export_code(path))
    assert not bad, "export code belongs in bert_tasks/exports:\n" + "\n".join(bad)


def test_the_checker_sees_export_code(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import tensorflow as tf\nfrom safetensors.numpy import save\n\n\n"
                      "def export_version(model):\n    tf.saved_model.save(model, 'x')\n\n\n"
                      "def save_saved_model(module):\n    pass\n\n\n"
                      "class M:\n    def export(self):\n        return self.model.export('x')\n")
    assert sorted(w.split(" (")[0] for w in _export_code(str(source))) == [
        "export_version", "safetensors' writer", "save_saved_model", "saved_model.save"]


def test_the_checker_sees_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import data.glue\nfrom modeling import x\n\n\ndef f():\n"
                      "    import tensorflow as tf\n\nCODE = '''\nfrom bert_cli import y\n'''\n")
    assert sorted(_imports(str(source))) == [("bert_cli", False), ("data", True),
                                             ("modeling", True), ("tensorflow", False)]
