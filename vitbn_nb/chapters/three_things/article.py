"""What the summary of Touvron et al. (2022), "Three things everyone should know about Vision Transformers", reports:
what chapter 07 sets its runs beside, per question."""

SAID = {
    "parallel_parameters": "each parallel block has the parameters and compute of the blocks it replaces",
    "parallel_accuracy": "2 branches is the best choice; parallel helps deeper, harder-to-optimise models "
    "(ViT-S60: S20x3 ~ S30x2)",
    "parallel_latency_1": "a significant speed-up when processing one image at a time, on V100 GPUs",
    "parallel_latency_n": "no gain once the batch is large",
    "parallel_training": "(not reported in the summary)",
    "finetune_accuracy": "MHSA-only fine-tuning at 384x384 is very close to full fine-tuning (ImageNet-val and -V2); "
    "with FFN-only fine-tuning the results differ significantly",
    "finetune_memory": "about 10 % of GPU memory",
    "finetune_time": "about 10 % faster (fewer gradients to compute)",
    "finetune_storage": "MHSA weights are about 1/3 of the total: 66 % less storage per extra resolution",
    "hmlp_accuracy": "no accuracy against the linear stem; among the stems compared, hMLP 'achieved better "
    "accuracy-computation balance'",
    "hmlp_flops": "ViT-B with the hMLP stem needs 17.73 GFLOPs, less than 1 % more than with a linear projection",
    "hmlp_patches": "each 16x16 patch is processed on its own",
}
