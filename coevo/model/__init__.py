"""The policy model's lifecycle: made, saved, adapted, imported, exported, pruned.

checkpoint.py (a Hugging Face model directory plus coevo's training state), cache.py (the policies
this process has loaded), bootstrap.py, supervised.py, tokenizer.py and constraint_warm_start.py
(the tiny default policy and its warm starts), lora.py (peft adapters on a frozen base),
import_model.py / export.py (a GGUF file in, a merged plain checkpoint out) and retention.py (which
checkpoints keep their weights).
"""
