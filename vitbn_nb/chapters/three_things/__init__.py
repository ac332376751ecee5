"""Chapter 07: three things from Touvron et al. (parallel blocks, attention-only fine-tuning, an hMLP stem)."""
