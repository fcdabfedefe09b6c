"""Quality parity: fine-tuning scores of this port against HF transformers from the same weights
(each ``*_hf`` twin is the HF side, run by its benchmark under ``bench/.venvs/hf``)."""
