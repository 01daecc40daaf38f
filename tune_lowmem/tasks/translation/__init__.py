"""The translation task (`task`: the DynamicConv Transformer on IWSLT'14 de-en) and what only it
needs: beam-search decoding and BLEU (`decode`), fairseq's checkpoints and names
(`fairseq_interop`, `fairseq_tools`), and the export of a trial to fairseq (`export`)."""

from .task import IWSLT14_VOCAB, DynamicConvIwslt14

__all__ = ["IWSLT14_VOCAB", "DynamicConvIwslt14"]
