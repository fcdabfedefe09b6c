"""The special WordPiece tokens: one source of truth for every module."""

PAD = "[PAD]"
UNK = "[UNK]"
CLS = "[CLS]"
SEP = "[SEP]"
MASK = "[MASK]"

ALL = (PAD, UNK, CLS, SEP, MASK)
