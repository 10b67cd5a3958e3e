"""The decode core: llama.cpp's model and context behind one module, sampling, the drafts, the speculative
verify loop, its cost model and controller, and the machine's measured costs. Imports the machine and the
model store."""
