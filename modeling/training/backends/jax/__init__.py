"""What JAX (and any Keras backend but TensorFlow) gives a training job: ``optimizer.py``
(Keras' own update path), ``settings.py`` (the TensorFlow-only flags refused, one table),
``steps.py`` (the compiled step, the devices, the job's steps), ``checkpoints.py``
(Orbax's ``jax_checkpoints/N``), ``predict.py`` (the compiled forward)."""
