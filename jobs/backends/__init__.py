"""Training backends: the only modules that touch AWS (SageMaker) or local processes."""
