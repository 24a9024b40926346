"""The model registry: a model package for each completed lineage that produced a model (SageMaker's Model
Registry on the SageMaker backend, and always the store), with its approval."""
