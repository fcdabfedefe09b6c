"""Fused training kernels: the switch (``switch``), the fused GELU dense (``gelu_dense``) and the
C++ CPU ops (``cpu_ops`` + ``bert_cpu_ops.cc``: dropout, LayerNorm, bfloat16 GELU, AdamWeightDecay
update)."""
