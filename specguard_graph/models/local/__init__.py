"""The local engine: a Hugging Face model on this machine, run through the project's own
row-invariant CPU kernels (`kernels/`), with attention capture, decoding, verification and
the KV and prefix caches."""
