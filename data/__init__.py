"""Data side of the BERT port: tokenization, example generators, task readers, pipelines."""
