"""One FP16 checkpoint into f16 / q8_0 / q4_k_m GGUF tiers in the model cache."""
