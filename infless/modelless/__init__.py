"""Model-less serving (INFaaS): a registered model's generated variants, their profiles, the
per-query variant selection, the variants' live states and model-vertical scaling."""
