"""Put this folder first on PYTHONPATH and the process behaves as if TensorFlow were not
installed: any import of ``tensorflow`` or ``tensorflow_text`` raises ModuleNotFoundError, and
``importlib.util.find_spec`` finds neither.
(The JAX path must not need TensorFlow: tests/modeling/test_jax_backend.py,
tests/bert_tasks/test_jax_pretraining.py and test_jax_finetuning.py.)"""

import importlib.util
import sys

BLOCKED = ("tensorflow", "tensorflow_text")


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError("No module named %r (blocked: no-TensorFlow test)" % name,
                                      name=name)  # as an import of a missing module
        return None


sys.meta_path.insert(0, _NoTensorFlow())


def _find_spec(name, package=None, _find=importlib.util.find_spec):
    # importlib.util.find_spec answers None for a module that is not installed (Orbax's
    # etils asks it whether TensorFlow is there).
    if name.split(".")[0] in BLOCKED:
        return None
    return _find(name, package)


importlib.util.find_spec = _find_spec
