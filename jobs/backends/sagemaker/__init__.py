"""The SageMaker backend: training jobs, endpoints, progress and events through the SDK and boto3."""
