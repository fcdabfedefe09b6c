"""modeling/layers/embeddings.py: the word-embedding lookup and the tied output layer."""

import numpy as np
import tensorflow as tf

from modeling.layers.embeddings import WordEmbedding


def _table(vocab=50, hidden=8):
    layer = WordEmbedding(vocab, hidden)
    layer.build()
    return layer


def test_lookup_and_tied_logits_are_the_table_rows_and_products():
    layer = _table()
    table = layer.embeddings.numpy()  # [V, H]
    ids = np.array([[3, 0, 49], [7, 7, 1]])
    np.testing.assert_array_equal(layer(tf.constant(ids)).numpy(), table[ids])
    x = np.random.RandomState(0).randn(4, 8).astype(np.float32)
    np.testing.assert_allclose(layer(tf.constant(x), reverse=True).numpy(), x @ table.T,
                               rtol=1e-5, atol=1e-6)


def test_lookup_gradient_is_sparse_and_the_table_is_read_not_gathered():
    """The lookup's gradient is IndexedSlices (the original's one-hot-free lookup), and the graph
    gathers from a read of the table: a gather on the variable itself would switch it to
    copy-on-read, copying the whole table at every later read (the tied output layer's)."""
    layer = _table()

    @tf.function
    def grads(ids, x):
        with tf.GradientTape() as tape:
            lookup = tf.reduce_sum(layer(ids) * 2.0)
        sparse = tape.gradient(lookup, layer.embeddings.value)
        with tf.GradientTape() as tape:
            both = tf.reduce_sum(layer(ids)) + tf.reduce_sum(layer(x, reverse=True))
        return sparse, tape.gradient(both, layer.embeddings.value)

    ids, x = tf.constant([[1, 2, 2]]), tf.ones([2, 8])
    sparse, dense = grads(ids, x)
    assert isinstance(sparse, tf.IndexedSlices)
    counts = np.zeros([50, 8], np.float32)
    np.add.at(counts, [1, 2, 2], 2.0)
    np.testing.assert_array_equal(tf.convert_to_tensor(sparse).numpy(), counts)
    assert isinstance(dense, tf.Tensor) and not isinstance(dense, tf.IndexedSlices)
    logits_grad = np.ones([2, 50], np.float32).T @ np.ones([2, 8], np.float32)  # d(sum x T^T)/dT
    np.testing.assert_allclose(dense.numpy(), counts / 2.0 + logits_grad, rtol=1e-6)
    types = {op.type for op in grads.get_concrete_function(ids, x).graph.get_operations()}
    assert "GatherV2" in types and "ResourceGather" not in types
