"""bert_common.checks: the value checks the tools and the driver share."""

import pytest

from bert_common import checks
from bert_common.errors import FlagError


def test_check_seq_length_is_the_originals_message():
    checks.check_seq_length(128, 128)
    with pytest.raises(FlagError, match=r"^Cannot use sequence length 129 because the BERT model "
                                        r"was only trained up to sequence length 128$"):
        checks.check_seq_length(129, 128)
