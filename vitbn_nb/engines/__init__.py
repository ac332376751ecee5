"""Training runs into the run store (``training``), the eager engine every run uses, the stacked engine for GPUs (loaded
only where a stacked run trains), the device check that decides between them, fine-tuning."""
