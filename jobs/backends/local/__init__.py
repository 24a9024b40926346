"""The local backend: training jobs and endpoints as processes on this machine, shaped like SageMaker's."""
