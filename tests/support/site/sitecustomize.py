"""The suite's processes skip two optional imports that nothing in this project uses.

``make test`` puts this folder on ``PYTHONPATH`` (tests/suite.py), so that every Python process
of the suite (its pytest workers, every tool and script they start) runs this file first. The
development install has JAX (the JAX backend's tests) and scikit-learn (seqeval, the independent
NER scorer of tests/data/ner/test_conlleval.py). Where they are installed, ``import tensorflow``
imports both although nothing here calls what they are for:

- TensorFlow Lite's converter imports ``jax`` for its ``experimental_from_jax``, and Keras's
  Orbax checkpoint callback imports it too (a JAX process has imported it before);
- Keras imports ``sklearn`` for its scikit-learn wrappers (``keras.wrappers``).

Each import is inside ``try: ... except ImportError``, and together they were a third of
``import tensorflow`` (1.1 of 3.2 CPU-seconds), paid by each of the suite's processes. The
finder below answers "not installed" to exactly those two importers, which is what the base
install (requirements.txt) gives them; everyone else (JAX processes, seqeval) imports the
packages as usual. It changes no result: nothing in the project or its tests uses either
integration.
"""

import sys

# (package, the module whose optional import of it is skipped)
_SKIPPED = {("jax", "tensorflow.lite.python.util"),
            ("jax", "keras.src.callbacks.orbax_checkpoint"),
            ("sklearn", "keras.src.wrappers.fixes"),
            ("sklearn", "keras.src.wrappers.utils"),
            ("sklearn", "keras.src.wrappers.sklearn_wrapper")}


class _SkipOptionalImports:
    """A meta-path finder: ``find_spec`` raises ``ModuleNotFoundError`` for a package of
    ``_SKIPPED`` imported directly by its module there, and returns None (no opinion) for every
    other import."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is not None:  # a submodule: its package was already imported
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(
                ("importlib", "_frozen_importlib")):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__") if frame is not None else None
        if (name, importer) in _SKIPPED:
            raise ModuleNotFoundError("No module named %r (skipped for %s by the test suite: "
                                      "tests/support/site)" % (name, importer), name=name)
        return None


sys.meta_path.insert(0, _SkipOptionalImports())
