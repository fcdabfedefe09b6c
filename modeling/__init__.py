"""Model side of the BERT port: config, encoder, heads, checkpoints, optimizer."""
