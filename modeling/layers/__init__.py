"""The encoder's Keras layers, each under the original's variable scope names.

``embeddings`` (word table, segment/position embeddings), ``attention`` (self-attention),
``transformer`` (one post-LN block), ``dense`` (2-D matmul + bias + activation), ``dropout``,
``layer_norm``, ``activations`` (GELU by config name).
"""
