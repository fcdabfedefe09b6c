"""The embedded default: a tiny corpus written for this project, and the end-to-end demo."""
