"""CoNLL-2003 named-entity recognition: reader, features, scorer (the serving SavedModel is an
export: ``bert_tasks.exports.ner``)."""
