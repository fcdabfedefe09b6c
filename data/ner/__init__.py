"""CoNLL-2003 named-entity recognition: reader, features, scorer, serving."""
