"""The machine: its cores, memory and devices, ggml's CPU kernels and log, and other computers' devices
through llama.cpp's RPC backend. Imports only the shared base (runtime.errors, runtime.atomic)."""
