"""`specquant bench`: measure configurations side by side on this machine, honestly.

Configurations run interleaved, prompt by prompt (A B C, A B C, ...), in rotating order, after a warm-up;
every run starts from an empty KV cache; medians with min and max are reported; speed-ups are ratios to
the baseline within the same run. Next to every speculative figure stands the cost model's prediction
from the acceptance, draft cost c and batch cost v(n) measured in the same run (docs/architecture.md §5).

configs (what is compared), workloads (the prompt sets and their scoring), runners (one timed answer),
sweep (acceptance against speed-up), run (the interleaved run and `specquant bench`), report (tables,
report.md, plots), memory (peak memory per configuration, in its own process), anchor (llama.cpp's own
speculative decoding).
"""
