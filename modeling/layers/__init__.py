"""The encoder's Keras layers, each under the original's variable scope names.

``embeddings`` (word table, segment/position embeddings), ``attention`` (self-attention),
``transformer`` (one post-LN block), ``dense`` (2-D matmul + bias + activation), ``dropout``,
``layer_norm``, ``activations`` (GELU by config name). ``ConfigArgs`` gives the layers and
heads their one ``get_config``.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple


class ConfigArgs:
    """Mixin (first among the bases): ``get_config`` adds the constructor arguments named in
    ``CONFIG_ARGS``, which the layer keeps as attributes of the same names.

    Listed by hand, not left to Keras' automatic config, which stores only the arguments a
    caller passed: a ``.keras`` file then keeps every argument whatever the defaults become.
    """

    CONFIG_ARGS: Tuple[str, ...] = ()

    def get_config(self) -> Dict[str, Any]:
        """The base class's config and the ``CONFIG_ARGS`` attributes.

        Returns:
            The config dict (``from_config`` passes it back to the constructor).
        """
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.CONFIG_ARGS})
        return config
