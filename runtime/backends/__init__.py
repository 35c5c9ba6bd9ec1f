"""The model backends (transformers, llama.cpp for the target, the simulated one) that the verifier and the
draft workers share: a model with a KV cache it can extend, crop and keep a tree path of, and a tokenizer."""
