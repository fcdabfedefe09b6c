"""One place for exports: every artifact the project writes for use outside its own training
(serving, TF Hub, Hugging Face), above ``data`` and ``modeling`` so it can name both.

* ``saved_model``: SavedModels written whole (a folder replaced atomically, several together)
  and TF Serving's versioned layout (``<base>/1``, ``2``, ...; ``check_export_base``);
* ``classifier``, ``squad``, ``ner``: the fine-tuned tasks' serving SavedModels (ids or raw
  text in, tokenized in graph), on ``serving``'s ``ServingModule`` (the model's variables, the
  in-graph tokenizer, ``export_version`` and ``export_saved_model``);
* ``hub_encoder``, ``hub_preprocessor``, ``hub``: the TF Hub-style encoder and preprocessor
  SavedModels, and ``export_hub`` (a checkpoint -> both);
* ``hf``: a Hugging Face folder (``write_hf_folder``, ``export_hf_model``); reading one is
  checkpoint loading (``modeling.checkpoints.hf``);
* ``convert``: ``convert_checkpoint.py``'s conversions (a TF1 checkpoint, a ``.keras`` file or a
  Hugging Face folder out);
* ``checkpoint``: ``export_for_finetuning``, the checkpoint a training run leaves for the
  fine-tuning tools (``<output_dir>/export/``).

Nothing is imported here: each module loads TensorFlow (and Keras) as it needs.
"""
