"""Put this folder first on PYTHONPATH and the process behaves as if TensorFlow were not
installed: any import of ``tensorflow`` or ``tensorflow_text`` raises ModuleNotFoundError.
(The JAX path must not need TensorFlow: tests/modeling/test_jax_backend.py,
tests/bert_tasks/test_jax_pretraining.py and test_jax_finetuning.py.)"""

import sys


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text"):
            raise ModuleNotFoundError("No module named %r (blocked: no-TensorFlow test)" % name,
                                      name=name)  # as an import of a missing module
        return None


sys.meta_path.insert(0, _NoTensorFlow())
