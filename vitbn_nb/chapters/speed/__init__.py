"""Chapter 08: where article 1's speed-up comes from (depth, normalisation, data pipeline, the hardware)."""
