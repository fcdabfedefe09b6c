"""Quality parity: fine-tuning scores of this port against HF transformers, same weights.

Each ``*_hf`` twin is the HF side, started by its benchmark under ``bench/.venvs/hf``."""
