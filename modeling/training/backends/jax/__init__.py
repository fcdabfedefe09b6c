"""What JAX (and any Keras backend but TensorFlow) gives a training job: ``optimizer.py``
(Keras' own update path), ``settings.py`` (the TensorFlow-only flags refused, one table),
``steps.py`` (the compiled step, the devices, the job's steps), ``checkpoints.py``
(``jax-ckpt-N.npz``), ``predict.py`` (the compiled forward)."""
