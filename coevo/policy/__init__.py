"""The trained policy: its checkpoints, how it starts, and how it is updated.

checkpoint.py (a Hugging Face model directory plus coevo's training state, loading and saving),
bootstrap.py, supervised.py, tokenizer.py and constraint_warm_start.py (the tiny default policy and
its warm starts), update.py with logprobs.py, prefix.py, teacher.py and mismatch.py (the RL update
of the registered objective), distributed.py (the same update in torchrun ranks with DDP), lora.py
(peft adapters on a frozen base), retention.py (which checkpoints keep their weights), and
import_model.py / export.py (a GGUF file in, a merged plain checkpoint out).
"""
